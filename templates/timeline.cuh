// timeline.cuh — where a kernel's cycles go, for whoever tunes it. Compiled with DCPATTN_TIMELINE
// defined (the library built with -DDCPATTN_TIMELINE passes it to NVRTC: build/bench_timeline,
// docs/performance.md "Timeline"), a kernel's Timeline sums, in each thread's registers, the SM
// cycles (%clock) between consecutive marks, each interval into the stage that the mark ending it
// names, and the kernel's last act stores the sums of one thread per warpgroup into its module's
// global array dcpattn_timeline: for each of the first TIMELINE_CTAS CTAs (blockIdx.x +
// gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) and its first TIMELINE_ROLES warpgroups, a
// record of TIMELINE_WORDS words:
//     [0] cycles from the Timeline's start to the store, [1] KV tiles, [2] segments (a balanced
//     schedule's pieces), [3 + s] the cycles of stage s (TimelineStage), [15] 1 (written)
// A launch overwrites the records of its CTAs; the host finds them with dcpattn_attn_timeline.
// Without DCPATTN_TIMELINE a Timeline is empty and its calls compile to nothing: the kernels'
// SASS is that of a build without this file (tests/sass_diff.sh). The MLA kernels keep one
// (templates/mla.cuh: dense, narrow and sparse sm_90a); the GQA kernels none.
#pragma once

namespace dcpattn {

// The stages, in the order of DCPATTN_TIMELINE_STAGES (include/dcpattn.h).
enum TimelineStage {
    TL_START,      // schedule, Q tile, until the first tile's stage
    TL_WAIT_LOAD,  // waiting for a KV tile's bytes (timeline builds wait for a whole tile or half in one place)
    TL_CONVERT,    // FP8: a tile into 16-bit (convert_tile)
    TL_SCORES,     // S = Q K^T issued and waited for
    TL_SOFTMAX,    // mask, row max, exponent, row sums
    TL_PUBLISH,    // P and the reference max to shared memory for the other warpgroup
    TL_WAIT_PEER,  // waiting at a barrier for the other warpgroup
    TL_PV,         // O += P V issued and waited for, refills issued
    TL_MERGE,      // balanced schedule: a piece's state published, or the states of a cut sequence added
    TL_EPILOGUE,   // row sums, the rows stored
    TL_GATHER,     // sparse producer: the cp.async of a tile's kept rows
    TL_STAGES
};
constexpr int TIMELINE_CTAS = 4096, TIMELINE_ROLES = 3, TIMELINE_WORDS = 16;
static_assert(3 + TL_STAGES < TIMELINE_WORDS, "a record holds every stage");

#ifdef DCPATTN_TIMELINE
}  // namespace dcpattn
extern "C" {  // (unmangled: the host looks it up by name)
__device__ long long dcpattn_timeline[dcpattn::TIMELINE_CTAS * dcpattn::TIMELINE_ROLES * dcpattn::TIMELINE_WORDS];
}
namespace dcpattn {

// (32-bit counters: the kernels they time run for far fewer than 2^32 cycles, and 15 registers
// instead of 30 leave the register-heavy kernels as they are)
struct Timeline {
    unsigned acc[TL_STAGES], t, t0, tiles = 0, segments = 0;
    static __device__ __forceinline__ unsigned now() {
        unsigned c;
        asm volatile("mov.u32 %0, %%clock;" : "=r"(c));
        return c;
    }
    __device__ __forceinline__ Timeline() {
#pragma unroll
        for (int s = 0; s < TL_STAGES; ++s) acc[s] = 0;
        t = t0 = now();
    }
    // the cycles since the previous mark belong to stage s
    __device__ __forceinline__ void mark(int s) {
        const unsigned n = now();
        acc[s] += n - t;
        t = n;
    }
    __device__ __forceinline__ void segment(int n_tiles) {
        ++segments;
        tiles += n_tiles;
    }
    // by the thread that keeps the record of warpgroup `role` (keeper: one thread of it)
    __device__ __forceinline__ void store(int role, bool keeper) const {
        const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        if (!keeper || cta >= TIMELINE_CTAS || role >= TIMELINE_ROLES) return;
        long long *w = dcpattn_timeline + ((long long)cta * TIMELINE_ROLES + role) * TIMELINE_WORDS;
        w[0] = now() - t0;
        w[1] = tiles;
        w[2] = segments;
#pragma unroll
        for (int s = 0; s < TL_STAGES; ++s) w[3 + s] = acc[s];
        w[TIMELINE_WORDS - 1] = 1;
    }
};
#else
struct Timeline {
    __device__ __forceinline__ void mark(int) {}
    __device__ __forceinline__ void segment(int) {}
    __device__ __forceinline__ void store(int, bool) const {}
};
#endif

}  // namespace dcpattn

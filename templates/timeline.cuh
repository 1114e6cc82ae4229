// timeline.cuh — where a kernel's cycles go, for whoever tunes it. Compiled with DCPATTN_TIMELINE
// defined (the library built with -DDCPATTN_TIMELINE passes it to NVRTC: build/bench_timeline,
// docs/performance.md "Timeline"), a kernel's Timeline adds the SM cycles (%clock) between
// consecutive marks of the first thread of each warpgroup, each interval to the stage that the
// mark ending it names, into its module's global array dcpattn_timeline: for each of the first
// TIMELINE_CTAS CTAs (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) and its
// first TIMELINE_ROLES warpgroups, a record of TIMELINE_WORDS counters, summed over launches:
//     [0] cycles from the Timeline's start to finish(), [1] KV tiles, [2] segments (a balanced
//     schedule's pieces), [3 + s] the cycles of stage s (TimelineStage), [15] launches
// The host finds the array with dcpattn_attn_timeline, reads it and clears it. Without
// DCPATTN_TIMELINE a Timeline is empty and its calls compile to nothing: the kernels' SASS is
// that of a build without this file (tests/sass_diff.sh). The MLA kernels (templates/mla.cuh:
// dense, narrow and sparse sm_90a) and the GQA kernels (templates/gqa.cuh) keep one.
#pragma once

namespace dcpattn {

// The stages, in the order of DCPATTN_TIMELINE_STAGES, and the records' layout, as
// DCPATTN_TIMELINE_CTAS, _ROLES and _WORDS say (include/dcpattn.h; tests/test_timeline.c checks both).
enum TimelineStage {
    TL_START,      // schedule, Q tile, until the first tile's stage
    TL_WAIT_LOAD,  // waiting for a KV tile's bytes (MLA's timeline builds wait for them in one place)
    TL_CONVERT,    // FP8: a tile into 16-bit (convert_tile)
    TL_SCORES,     // S = Q K^T issued and waited for
    TL_SOFTMAX,    // mask, row max, exponent, row sums
    TL_PUBLISH,    // P and the reference max to shared memory for the other warpgroup
    TL_WAIT_PEER,  // waiting at a barrier for the other warpgroup (or role)
    TL_PV,         // O += P V issued and waited for, refills issued
    TL_MERGE,      // balanced schedule: a piece's state published, a cut sequence's states added
    TL_EPILOGUE,   // row sums, the rows stored
    TL_GATHER,     // the cp.async copies of a tile issued (GQA's gather, the sparse producer's)
    TL_STAGES
};
constexpr int TIMELINE_CTAS = 4096, TIMELINE_ROLES = 3, TIMELINE_WORDS = 16;
static_assert(3 + TL_STAGES < TIMELINE_WORDS, "a record holds every stage");

#ifdef DCPATTN_TIMELINE
}  // namespace dcpattn
extern "C" {  // (unmangled: the host looks it up by name)
__device__ unsigned long long dcpattn_timeline[dcpattn::TIMELINE_CTAS * dcpattn::TIMELINE_ROLES *
                                               dcpattn::TIMELINE_WORDS];
}
namespace dcpattn {

// Every thread constructs one, but only the first thread of a warpgroup (the keeper) reads the
// clock and adds to its record, each interval as it ends (red.global.add: nothing waits for it),
// so a Timeline holds the record's address and two clock readings, not a counter per stage.
struct Timeline {
    unsigned long long *rec;  // the keeper's record, else null
    unsigned t, t0;
    static __device__ __forceinline__ unsigned now() {
        unsigned c;
        asm volatile("mov.u32 %0, %%clock;" : "=r"(c));
        return c;
    }
    __device__ __forceinline__ Timeline() {
        const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), role = threadIdx.x >> 7;
        rec = (threadIdx.x & 127) == 0 && cta < TIMELINE_CTAS && role < TIMELINE_ROLES
                  ? dcpattn_timeline + ((unsigned long long)cta * TIMELINE_ROLES + role) * TIMELINE_WORDS
                  : nullptr;
        t = t0 = now();
    }
    // the cycles since the previous mark belong to stage s
    __device__ __forceinline__ void mark(int s) {
        if (!rec) return;
        const unsigned n = now();
        atomicAdd(rec + 3 + s, (unsigned long long)(n - t));
        t = n;
    }
    __device__ __forceinline__ void segment(int n_tiles) {
        if (!rec) return;
        atomicAdd(rec + 1, (unsigned long long)n_tiles);
        atomicAdd(rec + 2, 1ull);
    }
    // the kernel's last act, by every thread that constructed it
    __device__ __forceinline__ void finish() const {
        if (!rec) return;
        atomicAdd(rec, (unsigned long long)(now() - t0));
        atomicAdd(rec + TIMELINE_WORDS - 1, 1ull);
    }
};
#else
struct Timeline {
    __device__ __forceinline__ void mark(int) {}
    __device__ __forceinline__ void segment(int) {}
    __device__ __forceinline__ void finish() const {}
};
#endif

}  // namespace dcpattn

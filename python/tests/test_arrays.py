"""CPU: how arrays are read: __cuda_array_interface__ (v2/v3) and DLPack (legacy and
versioned capsules) over fake producers, and stream arguments."""

import pytest

from dcpattn import ArgumentError
from dcpattn._arrays import UNKNOWN_DEVICE, parse, stream_handle
from fakes import CAI, DL


def test_cai_contiguous_and_strided():
    a = CAI((4, 8, 64), "float16", ptr=0x1000)
    p, shape, strides, dt, dev, sync, keep = parse(a, "a")
    assert (p, shape, strides, dt, dev, sync, keep) == (0x1000, (4, 8, 64), (512, 64, 1), "float16", UNKNOWN_DEVICE,
                                                        None, None)
    b = CAI((4, 8, 64), "float32", strides=(1024, 128, 1), stream=7)
    assert parse(b, "b")[2:6] == ((1024, 128, 1), "float32", UNKNOWN_DEVICE, 7)


def test_cai_v2_without_stream_and_native_order():
    a = CAI((3,), "int32", typestr="=i4")
    del a.__cuda_array_interface__["version"]
    assert parse(a, "a")[3] == "int32" and parse(a, "a")[5] is None


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(mask=object()), "masked arrays"),
    (lambda c: c.update(strides=(3, 2)), "byte stride 3 is not a multiple of the element size 2"),
    (lambda c: c.update(strides=(2,)), "1 strides for 2 dimensions"),
    (lambda c: c.pop("data"), "malformed __cuda_array_interface__"),
])
def test_cai_rejects(change, message):
    a = CAI((2, 3), "float16")
    change(a.__cuda_array_interface__)
    with pytest.raises(ArgumentError, match=message):
        parse(a, "a")


def test_cai_readonly_output_and_bfloat16_hint():
    with pytest.raises(ArgumentError, match="out is read-only"):
        parse(CAI((2, 8), "float16", readonly=True), "out", writable=True)
    assert parse(CAI((2, 8), "float16", readonly=True), "q")[3] == "float16"
    assert "pass such arrays through DLPack" in parse(CAI((2, 8), typestr="<V2"), "q")[3]


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack(versioned):
    a = DL((2, 3, 64), "bfloat16", ptr=0x4000, byte_offset=128, device=(2, 3), versioned=versioned)
    p, shape, strides, dt, dev, sync, keep = parse(a, "a", stream=0)
    assert (p, shape, strides, dt, dev, sync) == (0x4000 + 128, (2, 3, 64), (192, 64, 1), "bfloat16", 3, None)
    assert keep is not None  # the capsule stays alive until the launch
    assert a.streams == [1], "stream 0 (legacy default) is DLPack's 1"
    parse(a, "a", stream=0xabc)
    assert a.streams[-1] == 0xabc
    b = DL((5, 4), "int32", strides=(8, 1), device=(13, 0), versioned=versioned)
    assert parse(b, "b")[1:5] == ((5, 4), (8, 1), "int32", 0)


def test_dlpack_rejects():
    with pytest.raises(ArgumentError, match=r"q is on DLPack device type 1 \(CPU\): dcpattn takes CUDA arrays"):
        parse(DL((2, 2), device=(1, 0)), "q")
    with pytest.raises(ArgumentError, match=r"out is read-only \(DLPack flag READ_ONLY\)"):
        parse(DL((2, 2), versioned=True, readonly=True), "out", writable=True)
    assert parse(DL((2, 2), "float16", lanes=2), "q")[3] == "DLPack type (code 2, bits 16, lanes 2)"


def test_dlpack_names_what_the_interface_cannot():
    """An array with both protocols whose __cuda_array_interface__ cannot name its element
    type (bfloat16 as "<V2") is read through DLPack."""

    class Both(DL):
        __cuda_array_interface__ = {"shape": (2, 8), "typestr": "<V2", "data": (0x1000, False), "version": 3}

    assert parse(Both((2, 8), "bfloat16"), "q")[3] == "bfloat16"


def test_not_an_array():
    with pytest.raises(ArgumentError, match="q: builtins.list is not a CUDA array"):
        parse([1, 2], "q")
    with pytest.raises(ArgumentError, match="k_cache is None"):
        parse(None, "k_cache")


class _Torchish:
    cuda_stream = 0x55


class _CupyStream:
    ptr = 0x66


class _CudaCore:
    def __cuda_stream__(self):
        return (0, 0x77)


def test_stream_arguments():
    import ctypes

    assert stream_handle(0x1234) == 0x1234
    assert stream_handle(_Torchish()) == 0x55
    assert stream_handle(_CupyStream()) == 0x66
    assert stream_handle(_CudaCore()) == 0x77
    assert stream_handle(ctypes.c_void_p(0x88)) == 0x88
    with pytest.raises(ArgumentError, match="stream: builtins.str is not a CUDA stream"):
        stream_handle("s")


def test_placement_rule():
    """rank_tokens and local_len against the rule, brute force."""
    from dcpattn import local_len, rank_tokens

    for world in (1, 2, 3, 8):
        for inter in (1, 4, 16):
            for L in (0, 1, 5, 16, 17, 100, 385):
                seen = []
                for r in range(world):
                    toks = rank_tokens(L, world, r, inter)
                    assert len(toks) == local_len(L, world, r, inter)
                    assert all((g // inter) % world == r for g in toks)
                    assert [(g // (world * inter)) * inter + g % inter for g in toks] == list(range(len(toks)))
                    seen += toks
                assert sorted(seen) == list(range(L))


@pytest.mark.parametrize("producer", ["numpy", "torch"])
def test_capsules_of_real_producers(producer):
    """The capsule reader against a real DLPack producer (on the CPU: the device check is the
    caller's), so that the struct layouts are not only checked against themselves."""
    from dcpattn._arrays import read_capsule

    mod = pytest.importorskip(producer, reason="%s is not installed" % producer)
    if producer == "numpy":
        base = mod.arange(3 * 8 * 16, dtype=mod.float16).reshape(3, 8, 16)
        view = base[1:, ::2, :]
        ptr, item = view.__array_interface__["data"][0], 2
        cases = [(view, "float16", (2, 4, 16), (128, 32, 1)), (mod.zeros((5, 3), mod.int32), "int32", (5, 3), (3, 1))]
    else:
        base = mod.arange(3 * 8 * 16, dtype=mod.float32).reshape(3, 8, 16).to(mod.bfloat16)
        view = base[1:, ::2, :]
        ptr, item = view.data_ptr(), 2
        cases = [(view, "bfloat16", (2, 4, 16), (128, 32, 1)), (mod.zeros((5, 3), dtype=mod.int32), "int32", (5, 3),
                                                                 (3, 1))]
    for arr, dtype, shape, strides in cases:
        p, s, st, dt, (dev_type, dev_id), ro = read_capsule(arr.__dlpack__())
        assert (s, st, dt, dev_type, dev_id) == (shape, strides, dtype, 1, 0)
    assert read_capsule(view.__dlpack__())[0] == ptr and item == 2

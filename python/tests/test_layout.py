"""CPU: the ctypes mirrors of the C structs, the status list and the constants equal what
the C compiler makes of include/dcpattn.h. A header change that moves, resizes, adds or
removes a field of a mirrored struct fails here."""

import ctypes
import os
import shutil
import subprocess

import pytest

from conftest import REPO
from dcpattn import _lib


def c_program():
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "dcpattn.h"', "int main(void) {"]
    for cname, cls in _lib.STRUCTS.items():
        lines.append('    printf("size %s %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, _ in cls._fields_:
            lines.append('    printf("field %s %s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (cname, field, cname, field, cname, field))
    lines.append('#define X(name, text) printf("status %s %d\\n", #name, (int)DCPATTN_STATUS_##name);')
    lines.append("    DCPATTN_STATUS_LIST(X)")
    for name in _lib.CONSTANTS:
        lines.append('    printf("const %s %%d\\n", (int)%s);' % (name, name))
    lines.append('    printf("version %s\\n", DCPATTN_VERSION_STRING);')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc):
        pytest.skip("no C compiler (%s)" % cc)
    d = tmp_path_factory.mktemp("layout")
    (d / "layout.c").write_text(c_program())
    r = subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-I", os.path.join(REPO, "include"), str(d / "layout.c"),
                        "-o", str(d / "layout")], capture_output=True, text=True)
    assert r.returncode == 0, "the mirrored fields do not compile against the header:\n" + r.stderr
    out = subprocess.run([str(d / "layout")], capture_output=True, text=True, check=True).stdout
    return [line.split() for line in out.splitlines()]


def test_struct_layouts(c_layout):
    bad = []
    for rec in c_layout:
        if rec[0] == "size":
            py = ctypes.sizeof(_lib.STRUCTS[rec[1]])
            if py != int(rec[2]):
                bad.append("sizeof(%s): C %s, ctypes %d (fields added or removed?)" % (rec[1], rec[2], py))
        elif rec[0] == "field":
            f = getattr(_lib.STRUCTS[rec[1]], rec[2])
            if (f.offset, f.size) != (int(rec[3]), int(rec[4])):
                bad.append("%s.%s: C offset %s size %s, ctypes offset %d size %d"
                           % (rec[1], rec[2], rec[3], rec[4], f.offset, f.size))
    assert not bad, "the ctypes mirrors in python/dcpattn/_lib.py disagree with include/dcpattn.h:\n  " + \
        "\n  ".join(bad)


def test_status_list(c_layout):
    c = [(rec[1], int(rec[2])) for rec in c_layout if rec[0] == "status"]
    assert c == [(name, i) for i, name in enumerate(_lib.STATUS_NAMES)]


def test_constants_and_version(c_layout):
    c = {rec[1]: int(rec[2]) for rec in c_layout if rec[0] == "const"}
    assert c == _lib.CONSTANTS
    assert [rec[1] for rec in c_layout if rec[0] == "version"] == [__import__("dcpattn").__version__]


def test_packers_write_what_ctypes_reads():
    """The struct.Struct packers of the run path put every field where ctypes has it."""
    for cls in _lib.STRUCTS.values():
        values = []
        for i, (name, typ) in enumerate(cls._fields_):
            values.append(float(i) + 0.5 if typ is ctypes.c_float else 1000 + i)
        obj = cls()
        _lib.packer(cls).pack_into(obj, 0, *values)
        for (name, typ), v in zip(cls._fields_, values):
            if typ is ctypes.c_char_p:  # (ctypes would read a string there)
                got = ctypes.c_void_p.from_buffer(obj, getattr(cls, name).offset).value
            else:
                got = getattr(obj, name)
            assert got == v, (cls.__name__, name, got, v)

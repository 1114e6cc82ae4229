"""CPU: the package imports without a GPU, PyTorch or the library; a missing library is a
clear error at first use; the versions agree; the in-tree build backend makes a valid wheel."""

import base64
import csv
import hashlib
import io
import os
import re
import subprocess
import sys
import zipfile

import pytest

from conftest import PYTHON_DIR, REPO


def run_python(code, **env):
    e = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.path.dirname(__file__), **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)


def test_import_needs_no_torch_gpu_or_library():
    r = run_python("import sys\n"
                   "sys.modules['torch'] = None  # any import of torch would now fail\n"
                   "import dcpattn\n"
                   "assert dcpattn._lib._lib is None, 'the library was loaded at import'\n"
                   "assert not [m for m in sys.modules if m.split('.')[0] in ('cupy', 'jax', 'numpy')]\n"
                   "print(dcpattn.__version__)\n", DCPATTN_LIBRARY="/nonexistent/libdcpattn.so",
                   CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == __import__("dcpattn").__version__


def test_missing_library_says_how_to_build_it():
    r = run_python("import dcpattn, fakes\n"
                   "try:\n"
                   "    dcpattn.flash_attn_varlen_func(**fakes.attention_inputs(), out=fakes.DL((6, 8, 128)))\n"
                   "except dcpattn.LibraryNotFoundError as e:\n"
                   "    print(e)\n", DCPATTN_LIBRARY="/nonexistent/libdcpattn.so")
    assert r.returncode == 0, r.stderr
    assert "/nonexistent/libdcpattn.so does not exist" in r.stdout
    assert "`make` in the dcpattn repository" in r.stdout and "DCPATTN_LIBRARY" in r.stdout


def test_versions_agree():
    import dcpattn

    with open(os.path.join(REPO, "include", "dcpattn.h")) as f:
        header = re.search(r'#define DCPATTN_VERSION_STRING "([^"]+)"', f.read()).group(1)
    with open(os.path.join(PYTHON_DIR, "pyproject.toml")) as f:
        project = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    assert dcpattn.__version__ == header == project


def test_wheel_from_the_build_backend(tmp_path):
    sys.path.insert(0, os.path.join(PYTHON_DIR, "_build"))
    try:
        import dcpattn_build
    finally:
        sys.path.pop(0)
    name = dcpattn_build.build_wheel(str(tmp_path))
    assert re.fullmatch(r"dcpattn-[0-9.]+-py3-none-any\.whl", name)
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        sources = {"dcpattn/" + n for n in os.listdir(os.path.join(PYTHON_DIR, "dcpattn")) if n.endswith(".py")}
        assert sources | {"dcpattn/_build_info.py"} <= names
        info = name.split("-py3")[0] + ".dist-info/"
        assert {info + "METADATA", info + "WHEEL", info + "RECORD"} <= names
        assert "\nTag: py3-none-any\n" in z.read(info + "WHEEL").decode()
        assert "SOURCE_REPO = %r" % REPO in z.read("dcpattn/_build_info.py").decode()
        rows = list(csv.reader(io.StringIO(z.read(info + "RECORD").decode())))
        assert {r[0] for r in rows} == names
        for path, digest, size in rows:
            if path != info + "RECORD":
                data = z.read(path)
                assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
                    b"=").decode() and int(size) == len(data), path
    assert dcpattn_build.build_sdist(str(tmp_path)).endswith(".tar.gz")


def test_library_loads_and_reports_its_path():
    import dcpattn
    from dcpattn import _lib

    try:
        path = dcpattn.library_path()
    except dcpattn.LibraryNotFoundError as e:
        pytest.skip("libdcpattn.so is not built (make build/libdcpattn.so): %s" % str(e).splitlines()[0])
    assert os.path.isfile(path) and _lib.get().version == dcpattn.__version__

"""PEP 517 build backend of the dcpattn package, in the tree so that building needs
nothing but the Python that runs pip: the wheel is dcpattn/*.py, _build_info.py (the
repository it was built from, where the package looks for build/libdcpattn.so) and the
.dist-info files. Hooks: build_wheel, build_sdist, build_editable (a .pth file naming this
directory)."""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps: the same sources give the same wheel


def _project():
    """[project] name, version, description and requires-python from pyproject.toml."""
    with open(os.path.join(_HERE, "pyproject.toml"), "rb") as f:
        text = f.read().decode()
    try:
        import tomllib

        return tomllib.loads(text)["project"]
    except ImportError:  # Python < 3.11: the table holds plain "key = value" strings
        body = text.split("[project]", 1)[1].split("\n[", 1)[0]
        return dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', body, re.M))


def _metadata(p):
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: %s\n"
            % (p["name"], p["version"], p.get("description", ""), p.get("requires-python", ">=3.8")))


def _repo():
    repo = os.path.dirname(_HERE)
    return repo if os.path.isfile(os.path.join(repo, "include", "dcpattn.h")) else None


def _write_wheel(wheel_directory, files):
    """files: [(archive path, bytes)]; adds WHEEL and RECORD, returns the wheel's name."""
    p = _project()
    dist = "%s-%s" % (p["name"], p["version"])
    info = dist + ".dist-info"
    files = files + [(info + "/METADATA", _metadata(p).encode()),
                     (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: dcpattn_build\nRoot-Is-Purelib: true\n"
                                       b"Tag: py3-none-any\n")]
    record = []
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d\n" % (path, digest, len(data)))
    record.append(info + "/RECORD,,\n")
    files.append((info + "/RECORD", "".join(record).encode()))
    name = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            zi = zipfile.ZipInfo(path, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return name


def _package_files():
    pkg = os.path.join(_HERE, "dcpattn")
    out = []
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") and name != "_build_info.py":
            with open(os.path.join(pkg, name), "rb") as f:
                out.append(("dcpattn/" + name, f.read()))
    out.append(("dcpattn/_build_info.py", ("# written by the build backend\nSOURCE_REPO = %r\n" % _repo()).encode()))
    return out


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("dcpattn_editable.pth", (_HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        def add(arc, data):
            ti = tarfile.TarInfo(base + "/" + arc)
            ti.size, ti.mtime, ti.mode = len(data), int(time.time()), 0o644
            t.addfile(ti, io.BytesIO(data))

        add("PKG-INFO", _metadata(p).encode())
        for rel in ["pyproject.toml", "_build/dcpattn_build.py"] + ["dcpattn/" + n for n in sorted(
                os.listdir(os.path.join(_HERE, "dcpattn"))) if n.endswith(".py") and n != "_build_info.py"]:
            with open(os.path.join(_HERE, rel), "rb") as f:
                add(rel, f.read())
    return name

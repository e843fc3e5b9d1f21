"""Packing a local directory into a package archive for a job's working_dir or py_modules, by the rules of torus's
own packer (src/torus/package/pack.h), so that the CLI and this client give the same tree the same name and the
head keeps it once:

- a deflated zip of the directory's files, directories and symlinks, paths relative to the directory (working_dir)
  or to its parent (py_modules: "<module dir>/..."); ".git" and special files are skipped;
- `excludes` and the tree's .gitignore files are gitignore patterns ("*.pyc" at any depth, "/build" at the top,
  "data/" directories only, "a/*.txt" anchored, "**" any number of directories, "!x" re-includes what a .gitignore
  excluded);
- the name is "_torus_pkg_<32 hex digits>.zip": SHA-256 over each entry's path, kind, execute bit and bytes, in path
  order, so the same tree gives the same name whatever its files' times.
"""

import fnmatch
import hashlib
import io
import os
import stat
import time
import zipfile

_HASH_VERSION = b"torus-package-v1"
MAX_BYTES = 512 << 20


class _Pattern:
    def __init__(self, segments, negate, dir_only):
        self.segments, self.negate, self.dir_only = segments, negate, dir_only


def _parse(line):
    line = line.rstrip("\r")
    while line.endswith(" ") and not line.endswith("\\ "):
        line = line[:-1]
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    dir_only = line.endswith("/")
    if dir_only:
        line = line[:-1]
    anchored = "/" in line  # a slash at the start or in the middle anchors the pattern at the top
    if line.startswith("/"):
        line = line[1:]
    if not line:
        return None
    segments = ([] if anchored else ["**"]) + [s for s in line.split("/") if s]
    return _Pattern(segments, negate, dir_only)


def _parse_all(lines):
    return [p for p in (_parse(line) for line in lines) if p is not None]


def _match(pattern, pi, path, si):
    if pi == len(pattern):
        return si == len(path)
    if pattern[pi] == "**":
        if pi + 1 == len(pattern):
            return si < len(path)  # "a/**" is what is inside a, not a itself
        return any(_match(pattern, pi + 1, path, k) for k in range(si, len(path) + 1))
    if si == len(path) or not fnmatch.fnmatchcase(path[si], pattern[pi]):
        return False
    return _match(pattern, pi + 1, path, si + 1)


def _decide(patterns, path, is_dir):
    """True: the last matching pattern excludes `path`; False: it re-includes it; None: none matches."""
    excluded = None
    for p in patterns:
        if p.dir_only and not is_dir:
            continue
        if _match(p.segments, 0, path, 0):
            excluded = not p.negate
    return excluded


class _Walker:
    def __init__(self, excludes, use_gitignore, prefix):
        self.excludes = _parse_all(excludes or [])
        self.use_gitignore = use_gitignore
        self.prefix = prefix
        self.levels = []  # (depth, patterns) of the .gitignore files above the directory being walked
        self.items = []   # (archive path, source, kind 'f'/'d'/'l', st)

    def _excluded(self, rel, is_dir):
        if _decide(self.excludes, rel, is_dir):
            return True
        excluded = None
        for depth, patterns in self.levels:  # deeper files come later and win, as in git
            decided = _decide(patterns, rel[depth:], is_dir)
            if decided is not None:
                excluded = decided
        return bool(excluded)

    def walk(self, directory, rel):
        levels_before = len(self.levels)
        ignore = os.path.join(directory, ".gitignore")
        if self.use_gitignore and os.path.isfile(ignore) and not os.path.islink(ignore):
            with open(ignore, encoding="utf-8", errors="surrogateescape") as f:
                self.levels.append((len(rel), _parse_all(f.read().split("\n"))))
        for name in sorted(n for n in os.listdir(directory) if n != ".git"):
            source = os.path.join(directory, name)
            st = os.lstat(source)
            if stat.S_ISREG(st.st_mode):
                kind = "f"
            elif stat.S_ISDIR(st.st_mode):
                kind = "d"
            elif stat.S_ISLNK(st.st_mode):
                kind = "l"
            else:
                continue  # sockets, FIFOs, devices
            path = rel + [name]
            if self._excluded(path, kind == "d"):
                continue
            self.items.append((self.prefix + "/".join(path) + ("/" if kind == "d" else ""), source, kind, st))
            if kind == "d":
                self.walk(source, path)
        del self.levels[levels_before:]


def _framed(data):
    return len(data).to_bytes(8, "little") + data


def pack_directory(directory, excludes=None, include_parent_dir=False, use_gitignore=True, max_bytes=MAX_BYTES):
    """(package name, zip bytes) of `directory`. ValueError when it is not a directory or the archive would be
    larger than `max_bytes`."""
    if not os.path.isdir(directory):
        raise ValueError(f"not a directory: {directory}")
    prefix = ""
    if include_parent_dir:
        base = os.path.basename(os.path.normpath(os.path.abspath(directory)))
        if not base:
            raise ValueError(f"directory has no name to prefix: {directory}")
        prefix = base + "/"
    walker = _Walker(excludes, use_gitignore, prefix)
    walker.walk(directory, [])
    walker.items.sort(key=lambda item: item[0].encode("utf-8", "surrogateescape"))
    digest = hashlib.sha256(_framed(_HASH_VERSION))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, source, kind, st in walker.items:
            if kind == "f":
                with open(source, "rb") as f:
                    data = f.read()
            elif kind == "l":
                data = os.fsencode(os.readlink(source))
            else:
                data = b""
            executable = kind == "f" and st.st_mode & 0o111
            digest.update(_framed(path.encode("utf-8", "surrogateescape")))
            digest.update(kind.encode() + (b"x" if executable else b"-"))
            digest.update(_framed(data))
            info = zipfile.ZipInfo(path, date_time=_zip_time(st.st_mtime))
            kind_bits = {"f": stat.S_IFREG, "d": stat.S_IFDIR, "l": stat.S_IFLNK}[kind]
            info.external_attr = (kind_bits | (st.st_mode & 0o777)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED if kind == "f" else zipfile.ZIP_STORED
            archive.writestr(info, data)
            if buffer.tell() > max_bytes:
                raise ValueError(f"the package of {directory} is larger than the limit of {max_bytes} bytes "
                                 f"({buffer.tell()} bytes written so far)")
    blob = buffer.getvalue()
    if len(blob) > max_bytes:
        raise ValueError(f"the package of {directory} is larger than the limit of {max_bytes} bytes "
                         f"({len(blob)} bytes)")
    return f"_torus_pkg_{digest.hexdigest()[:32]}.zip", blob


def _zip_time(mtime):
    t = time.localtime(max(mtime, 315532800))  # zip times start in 1980
    return (max(t.tm_year, 1980), t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)

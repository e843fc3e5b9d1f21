// Packing a local directory into a package archive, the way Ray's job clients do (runtime_env/packaging.py):
// a deflated zip of the directory's files with paths relative to it (working_dir), or to its parent (py_modules:
// the archive holds "<module dir>/..."), skipping what `excludes` and the directory's .gitignore files name.
//
// Exclusion patterns are gitignore patterns, matched against the path relative to the packed directory:
//   "*.pyc"      any file or directory of that name, at any depth
//   "/build"     only "build" at the top
//   "data/"      directories named data (and all below them), at any depth
//   "logs/*.txt" a pattern with a slash in the middle is anchored at the top
//   "**/tmp"     "**" matches any number of directories
//   "!keep.txt"  in a .gitignore, re-includes what an earlier pattern excluded
// A ".gitignore" file applies to its own directory and below, as git reads it; its "!" lines re-include only what
// .gitignore files excluded, not what `excludes` did. ".git" is always skipped. Every directory below `dir` is an entry
// ("sub/"), `dir` itself is not.
//
// The package's name is content-addressed: "_torus_pkg_<32 hex digits>.zip", the first 128 bits of a SHA-256 over
// every entry's path, kind, execute bit and bytes (symlinks: the target) in path order — so packing the same tree
// again gives the same name, whatever the files' times.
//
// Thread-safety: pure functions (the file system aside).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::package {

struct PackOptions {
  std::vector<std::string> excludes;  // gitignore patterns
  bool include_parent_dir = false;    // py_modules: entries are "<basename of dir>/..."
  bool use_gitignore = true;
  uint64_t max_bytes = 512ull << 20;  // refuse (FailedPrecondition, naming the size) an archive larger than this
};

struct Packed {
  std::string name;        // "_torus_pkg_<hex>.zip"
  std::string zip_path;    // the archive written
  uint64_t size = 0;       // its bytes
  uint64_t files = 0;      // regular files in it
};

// Packs `dir` into `out_path`. InvalidArgument when `dir` is not a directory; errors name the file that could not
// be read. Symlinks are stored as symlinks; other special files (sockets, FIFOs, devices) are skipped.
absl::StatusOr<Packed> PackDirectory(const std::string& dir, const std::string& out_path, const PackOptions& options);

// The name PackDirectory would give `dir`'s package, without writing an archive (it reads every file): a client
// asks the head for this name first and packs only when the head does not have it.
absl::StatusOr<std::string> PackageNameOfDirectory(const std::string& dir, const PackOptions& options);

// A fingerprint of `dir`'s tree from metadata alone (the absolute path; each entry's path, mode, size, modification
// and change times in nanoseconds, inode and device), reading no file's contents but the .gitignore files. Equal
// fingerprints mean the same package name unless a file was rewritten within one tick of the file system's clock
// without changing its size: a client that remembers names by fingerprint trusts only a tree whose newest change
// is older than that tick (newest_change_ns).
struct TreeStamp {
  std::string fingerprint;       // hex
  int64_t newest_change_ns = 0;  // the newest mtime or ctime of an entry, ns since the epoch
};
absl::StatusOr<TreeStamp> StampDirectory(const std::string& dir, const PackOptions& options);

// True when the relative path `path` (of a directory when `is_dir`) is excluded by `patterns` (gitignore syntax;
// later patterns win, "!" re-includes).
bool MatchesExclude(const std::vector<std::string>& patterns, std::string_view path, bool is_dir);

// Lowercase hex SHA-256 of `data`; of a file's contents (errors name the file).
std::string Sha256Hex(std::string_view data);
absl::StatusOr<std::string> Sha256File(const std::string& path);

}  // namespace torus::package

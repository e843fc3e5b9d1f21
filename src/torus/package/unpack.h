// Unpacking a package archive into a directory, safely: nothing is written outside the destination whatever the
// archive holds.
//
// Refused, with InvalidArgument naming the entry: a path longer than 4095 bytes, with a name longer than 255 or more
// than 256 directories deep; an absolute path ("/etc/x"), a ".." segment ("../x", "a/../../x"),
// a backslash or NUL in a name, two entries with the same path, a file under a path that is a file or a symlink, and a
// symlink whose target is absolute or resolves outside the destination ("a/link" -> "../../x"), resolved as the kernel
// would in the unpacked tree, through the archive's other symlinks (so "a/l1" -> "." with "a/l2" -> "l1/../.." is
// refused too; so are symlink cycles). Empty and "." segments are dropped ("./a//b" is "a/b"). Whatever the archive
// says of modes, files are written 0644 (0755 when any execute bit is set) and directories 0755; no setuid bits.
//
// The archive is unpacked into a fresh directory beside `dest` and renamed to `dest` once complete, so that `dest`
// either does not exist or holds the whole package; on an error the partial directory is removed. Symlinks are created
// after every file and directory, and files are opened without following symlinks.
//
// Thread-safety: pure function (the file system aside); two calls for one `dest` race on the rename, and the loser
// gets AlreadyExists with `dest` whole.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "torus/package/zip.h"

namespace torus::package {

// Checks every entry of `archive` as UnpackZip would (paths, symlinks, sizes, CRCs), without writing anything.
absl::Status CheckZip(std::string_view archive, const ZipLimits& limits);

// Unpacks `archive` into `dest`, which must not exist (AlreadyExists otherwise) and whose parent must.
absl::Status UnpackZip(std::string_view archive, const std::string& dest, const ZipLimits& limits);

}  // namespace torus::package

// File-system steps of the commit protocol: fsync of files and directories, atomic renames
// and symlink replacement, directory listing and removal. Each returns a Status whose message
// names the path and carries strerror(errno), so ENOSPC and EACCES read as such.
#ifndef OMNI_CKPT_FSIO_H
#define OMNI_CKPT_FSIO_H

#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "omni/result.h"

namespace omni {
namespace ckpt {
namespace fsio {

// A file descriptor closed with its owner.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    Fd(Fd &&o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Fd &operator=(Fd &&o) noexcept {
        if (this != &o) {
            if (fd_ >= 0) ::close(fd_);
            fd_ = o.fd_;
            o.fd_ = -1;
        }
        return *this;
    }
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }
    // Gives up ownership (for a close whose result matters).
    int release() {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }

private:
    int fd_ = -1;
};

std::string join(const std::string &dir, const std::string &name);
std::string basename(const std::string &path);
std::string dirname(const std::string &path);
// The absolute path with symlinks, "." and ".." resolved (realpath(3)); "" if it does not
// resolve (missing, no permission).
std::string real_path(const std::string &path);

Status fsync_path(const std::string &path);   // a file or a directory
Status make_dir(const std::string &path);     // one level; fine if it exists already
Status make_dirs(const std::string &path);    // like mkdir -p
Status rename_path(const std::string &from, const std::string &to);
// Points symlink `link` at `target` atomically (a temporary link renamed over it).
Status replace_symlink(const std::string &target, const std::string &link);

bool exists(const std::string &path);
bool is_dir(const std::string &path);
Result<std::uint64_t> file_size(const std::string &path);
// Seconds since the last modification of path (0 if in the future).
Result<std::uint64_t> age_seconds(const std::string &path);
// Names in a directory except "." and "..", sorted.
Result<std::vector<std::string>> list_dir(const std::string &path);
// pwrite(2) of all n bytes at `off`, retrying short writes and EINTR: 0, or the errno.
int pwrite_all(int fd, const void *p, std::size_t n, std::uint64_t off);
// Starts write-back of the whole pages of [off, off + n) that are dirty, without waiting for
// it (sync_file_range(2), SYNC_FILE_RANGE_WRITE), so the device writes a slice while the
// writer hashes and writes the next and the file's fsync later waits only for the rest.
// Partial pages at either end are left alone: the neighbouring slice may still be written
// into them, and on a device that needs stable pages that write would wait for the
// write-back. Advisory: where it is not supported nothing happens, and a write-back error
// is reported by the fsync that follows.
void start_writeback(int fd, std::uint64_t off, std::uint64_t n);
// The whole pages of [off, off + n) for pages of `page` bytes, as [first, second); empty
// (first == second) when the range covers no whole page.
std::pair<std::uint64_t, std::uint64_t> whole_pages(std::uint64_t off, std::uint64_t n, std::uint64_t page);
// Creates (or truncates) `path` with exactly `bytes`; not fsynced.
Status write_file(const std::string &path, const std::string &bytes);
// The whole file; an error naming the path when it cannot be read or is larger than
// `max_bytes` (nothing is allocated for it then).
Result<std::string> read_file(const std::string &path, std::uint64_t max_bytes);
Status remove_file(const std::string &path);
Status remove_tree(const std::string &path);
// Drops a file's pages from the page cache (benchmarks measure the disk, not memory).
void drop_cache(const std::string &path);

}  // namespace fsio
}  // namespace ckpt
}  // namespace omni

#endif

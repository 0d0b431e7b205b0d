// File-system steps of the commit protocol; see fsio.h.
#include "fsio.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace omni {
namespace ckpt {
namespace fsio {

namespace {
Error sys_error(const std::string &what, const std::string &path, int err) {
    return make_error(what + " " + path + ": " + std::strerror(err));
}
}  // namespace

std::string join(const std::string &dir, const std::string &name) {
    if (dir.empty()) return name;
    if (dir.back() == '/') return dir + name;
    return dir + "/" + name;
}

std::string basename(const std::string &path) {
    std::string p = path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    const auto slash = p.rfind('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string real_path(const std::string &path) {
    char buf[PATH_MAX];
    return ::realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

std::string dirname(const std::string &path) {
    std::string p = path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    const auto slash = p.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return p.substr(0, slash);
}

Status fsync_path(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sys_error("opening", path, errno);
    // fsync on a read-only descriptor flushes the inode's dirty data and metadata on Linux;
    // for a directory it makes the names created in it durable.
    int rc;
    do rc = ::fsync(fd);
    while (rc < 0 && errno == EINTR);
    const int err = errno;
    ::close(fd);
    if (rc < 0 && err != EINVAL) return sys_error("fsync of", path, err);
    return Status::success();
}

Status make_dir(const std::string &path) {
    if (::mkdir(path.c_str(), 0755) == 0 || (errno == EEXIST && is_dir(path)))
        return Status::success();
    return sys_error("creating directory", path, errno);
}

Status make_dirs(const std::string &path) {
    if (path.empty() || is_dir(path)) return Status::success();
    const std::string parent = dirname(path);
    if (parent != path)
        if (auto st = make_dirs(parent); !st) return st;
    return make_dir(path);
}

Status rename_path(const std::string &from, const std::string &to) {
    if (::rename(from.c_str(), to.c_str()) != 0)
        return make_error("renaming " + from + " to " + to + ": " + std::strerror(errno));
    return Status::success();
}

Status replace_symlink(const std::string &target, const std::string &link) {
    const std::string tmp = link + ".tmp-" + std::to_string(::getpid());
    ::unlink(tmp.c_str());
    if (::symlink(target.c_str(), tmp.c_str()) != 0)
        return sys_error("creating symlink", tmp, errno);
    if (::rename(tmp.c_str(), link.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        return sys_error("replacing symlink", link, err);
    }
    return Status::success();
}

bool exists(const std::string &path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
}

bool is_dir(const std::string &path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<std::uint64_t> file_size(const std::string &path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return sys_error("stat of", path, errno);
    return static_cast<std::uint64_t>(st.st_size);
}

Result<std::uint64_t> age_seconds(const std::string &path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return sys_error("stat of", path, errno);
    const std::time_t now = std::time(nullptr);
    return now > st.st_mtime ? static_cast<std::uint64_t>(now - st.st_mtime) : 0;
}

Result<std::vector<std::string>> list_dir(const std::string &path) {
    DIR *d = ::opendir(path.c_str());
    if (!d) return sys_error("listing", path, errno);
    std::vector<std::string> out;
    while (const dirent *e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

int pwrite_all(int fd, const void *p, std::size_t n, std::uint64_t off) {
    for (std::size_t done = 0; done < n;) {
        const ssize_t w = ::pwrite(fd, static_cast<const char *>(p) + done, n - done,
                                   static_cast<off_t>(off + done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        done += static_cast<std::size_t>(w);
    }
    return 0;
}

void start_writeback(int fd, std::uint64_t off, std::uint64_t n) {
    static const std::uint64_t page = [] {
        const long p = ::sysconf(_SC_PAGESIZE);
        return p > 0 ? static_cast<std::uint64_t>(p) : 4096;
    }();
    const auto [begin, end] = whole_pages(off, n, page);
    if (end == begin) return;
    // The errors (EINVAL, ESPIPE, EIO) are the fsync's to report or moot: see fsio.h.
    (void)::sync_file_range(fd, static_cast<off_t>(begin), static_cast<off_t>(end - begin),
                            SYNC_FILE_RANGE_WRITE);
}

std::pair<std::uint64_t, std::uint64_t> whole_pages(std::uint64_t off, std::uint64_t n, std::uint64_t page) {
    const std::uint64_t begin = (off + page - 1) / page * page, end = (off + n) / page * page;
    return end > begin ? std::make_pair(begin, end) : std::make_pair(begin, begin);
}

Status write_file(const std::string &path, const std::string &bytes) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
    if (fd.get() < 0) return sys_error("creating", path, errno);
    if (const int err = pwrite_all(fd.get(), bytes.data(), bytes.size(), 0)) return sys_error("writing", path, err);
    // Where a file system reports a failed write-back only at close (NFS), it is an error.
    if (::close(fd.release()) != 0) return sys_error("closing", path, errno);
    return Status::success();
}

Result<std::string> read_file(const std::string &path, std::uint64_t max_bytes) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return sys_error("opening", path, errno);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return sys_error("stat of", path, errno);
    if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > max_bytes)
        return make_error(path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                          std::to_string(max_bytes) + " expected at most");
    std::string out(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < out.size()) {
        const ssize_t r = ::read(fd.get(), &out[got], out.size() - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return sys_error("reading", path, errno);
        if (r == 0) return make_error(path + ": shorter than its size while being read");
        got += static_cast<std::size_t>(r);
    }
    return out;
}

Status remove_file(const std::string &path) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return sys_error("removing", path, errno);
    return Status::success();
}

Status remove_tree(const std::string &path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0)
        return errno == ENOENT ? Status::success() : Status(sys_error("stat of", path, errno));
    if (S_ISDIR(st.st_mode)) {
        auto names = list_dir(path);
        if (!names) return make_error(names.error());
        for (const auto &n : names.value())
            if (auto s = remove_tree(join(path, n)); !s) return s;
        if (::rmdir(path.c_str()) != 0) return sys_error("removing directory", path, errno);
        return Status::success();
    }
    return remove_file(path);
}

void drop_cache(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

}  // namespace fsio
}  // namespace ckpt
}  // namespace omni

// RAII over hid_t and HDF5 error capture; see h5.h.
#include "h5.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "format.h"
#include "hash.h"

namespace omni {
namespace ckpt {
namespace h5 {

void init() {
    static std::once_flag once;
    std::call_once(once, [] {
        H5open();
        // Errors are reported through Result messages; the default handler would print the
        // whole stack to stderr of the trainer on every expected failure (missing file...).
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    });
}

bool threadsafe() {
    hbool_t ts = 0;
    return H5is_library_threadsafe(&ts) >= 0 && ts;
}

namespace {
herr_t collect(unsigned n, const H5E_error2_t *err, void *data) {
    auto *out = static_cast<std::vector<std::string> *>(data);
    (void)n;
    if (err->desc && *err->desc) out->emplace_back(err->desc);
    return 0;
}
}  // namespace

namespace {
// HDF5's low-level I/O errors carry a long dump ("time = ..., filename = ..., errno = 28,
// error message = 'No space left on device', buf = 0x..."); the strerror text is what a user
// needs, the rest (pointers, offsets) only hides it.
std::string tidy(const std::string &desc) {
    const std::string key = "error message = '";
    const auto pos = desc.find(key);
    if (pos != std::string::npos) {
        const auto end = desc.find('\'', pos + key.size());
        if (end != std::string::npos) {
            const auto colon = desc.find(':');
            const std::string head = colon != std::string::npos && colon < pos ? desc.substr(0, colon) + ": " : "";
            return head + desc.substr(pos + key.size(), end - pos - key.size());
        }
    }
    std::string out;
    for (char c : desc) out += (c == '\n' || c == '\r') ? ' ' : c;
    return out;
}
}  // namespace

std::string last_error() {
    std::vector<std::string> parts;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &parts);
    H5Eclear2(H5E_DEFAULT);
    if (parts.empty()) return "HDF5 call failed";
    for (auto &p : parts) p = tidy(p);
    // Outermost first, then the innermost cause (which carries the errno text); the layers in
    // between repeat each other and only make the message long.
    std::string out = parts.front();
    if (parts.size() > 1 && parts.back() != parts.front()) out += ": " + parts.back();
    return out;
}

Error fail(const std::string &what) { return make_error(what + ": " + last_error()); }

Status Handle::close(const std::string &what) {
    if (id_ < 0) return Status::success();
    const herr_t rc = closer_ ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    if (rc < 0) return fail(what);
    return Status::success();
}

Handle file(hid_t id) { return Handle(id, H5Fclose); }
Handle dataset(hid_t id) { return Handle(id, H5Dclose); }
Handle space(hid_t id) { return Handle(id, H5Sclose); }
Handle type(hid_t id) { return Handle(id, H5Tclose); }
Handle plist(hid_t id) { return Handle(id, H5Pclose); }
Handle group(hid_t id) { return Handle(id, H5Gclose); }
Handle attr(hid_t id) { return Handle(id, H5Aclose); }

Handle dtype_type(DType t) {
    switch (t) {
    case DType::fp32: return type(H5Tcopy(H5T_IEEE_F32LE));
    case DType::fp16: {
        // IEEE half: sign 15, exponent 10..14 (bias 15), mantissa 0..9.
        Handle h = type(H5Tcopy(H5T_IEEE_F32LE));
        if (!h) return h;
        if (H5Tset_fields(h.get(), 15, 10, 5, 0, 10) < 0 || H5Tset_size(h.get(), 2) < 0 ||
            H5Tset_ebias(h.get(), 15) < 0 || H5Tset_precision(h.get(), 16) < 0)
            return Handle();
        return h;
    }
    case DType::bf16: {
        // bfloat16: the upper half of an fp32 (sign 15, exponent 7..14 bias 127, mantissa 0..6).
        Handle h = type(H5Tcopy(H5T_IEEE_F32LE));
        if (!h) return h;
        if (H5Tset_fields(h.get(), 15, 7, 8, 0, 7) < 0 || H5Tset_size(h.get(), 2) < 0 ||
            H5Tset_ebias(h.get(), 127) < 0 || H5Tset_precision(h.get(), 16) < 0)
            return Handle();
        return h;
    }
    case DType::int64: return type(H5Tcopy(H5T_STD_I64LE));
    case DType::uint8: return type(H5Tcopy(H5T_STD_U8LE));
    }
    return Handle();
}

Handle fapl() {
    Handle p = plist(H5Pcreate(H5P_FILE_ACCESS));
    if (!p) return p;
    // 1.10 format: required for virtual datasets, readable by h5py/h5dump >= 1.10.
    if (H5Pset_libver_bounds(p.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) return Handle();
    // Close every object with the file: a stray open object would otherwise keep the file
    // open past H5Fclose, after which we fsync and rename it.
    if (H5Pset_fclose_degree(p.get(), H5F_CLOSE_STRONG) < 0) return Handle();
    return p;
}

Result<Handle> create_file(const std::string &path) {
    init();
    // The file is created here, before HDF5 opens it (truncating): creating an inode can take
    // a tenth of a millisecond (ext4 searching its inode bitmap), and inside H5Fcreate it
    // would hold the library's global lock, which every other writer thread of the process
    // is waiting for. Same mode as HDF5's own creation (0666 less the umask).
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return make_error("creating " + path + ": " + std::strerror(errno));
    // Room for HDF5's first writes, asked for here: H5Fcreate writes the superblock at once,
    // and when that write fails (a full disk) HDF5 closes the half-made file itself, which
    // HDF5 2.x builds with assertions on (Debian unstable's 2.2) abort in (H5F__dest:
    // "H5AC_cache_is_clean"; 1.10 returns the error). A file system without room for a first
    // metadata block fails here, outside HDF5; H5Fcreate's truncation gives the block back
    // just before HDF5 needs a little of it. Where fallocate is not supported, HDF5 is asked
    // anyway.
    if (::fallocate(fd, 0, 0, static_cast<off_t>(kMetaBlockBytes)) != 0 && (errno == ENOSPC || errno == EDQUOT)) {
        const int e = errno;
        ::close(fd);
        return make_error("creating " + path + ": " + std::strerror(e));
    }
    ::close(fd);
    Handle p = fapl();
    // HDF5 allocates object headers, groups' link heaps and B-trees from blocks of this size,
    // each taken at the end of the file when the last one is full (default 2 KiB). With the
    // default, a shard's metadata lands every few slices between the slices' data (and at
    // the end of the file), and a reader opening its datasets makes a small read at each
    // place: on a cold cache a device round trip (on a parallel file system an RPC) per
    // tensor, which made a load 0.76-0.82x a raw read of the same bytes. With 64 KiB the
    // metadata of about sixty slices with block checksums (some 1.1 KiB each; a hundred
    // without) is one run that one readahead brings in. The part of the last block left
    // unused stays a hole in the file (apparent size, no disk blocks): at most 64 KiB a file.
    if (!p || H5Pset_meta_block_size(p.get(), kMetaBlockBytes) < 0) return fail("creating " + path);
    Handle f = file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, p.get()));
    if (!f) return fail("creating " + path);
    return f;
}

Status close_file(Handle &f, const std::string &what) {
    if (!f) return Status::success();
    if (H5Fflush(f.get(), H5F_SCOPE_LOCAL) < 0) {
        Error e = fail(what);
        discard_file(f);
        return Status(std::move(e));
    }
    return f.close(what);
}

void discard_file(Handle &f) {
    if (!f) return;
    // Only the sec2 driver's handle is a plain descriptor (every file written here is one).
    bool sec2 = false;
    if (Handle p = plist(H5Fget_access_plist(f.get()))) sec2 = H5Pget_driver(p.get()) == H5FD_SEC2;
    void *handle = nullptr;
    if (sec2 && H5Fget_vfd_handle(f.get(), H5P_DEFAULT, &handle) >= 0 && handle) {
        const int fd = *static_cast<int *>(handle);
        const int mem = ::memfd_create("omni-ckpt-discarded", MFD_CLOEXEC);
        // dup3 closes the file's descriptor and puts the memory file in its place, atomically:
        // HDF5's flush, truncate, unlock and close then act on memory (sparse: the metadata
        // written, a few KiB). Without it (no memfd), the close is tried on the file itself.
        if (mem >= 0) {
            (void)::dup3(mem, fd, O_CLOEXEC);
            ::close(mem);
        }
    }
    f.reset();
}

Result<Handle> open_file(const std::string &path) {
    init();
    Handle p = fapl();
    if (!p) return fail("opening " + path);
    // Only the lower bound matters for reading; allow any newer writer format.
    H5Pset_libver_bounds(p.get(), H5F_LIBVER_EARLIEST, H5F_LIBVER_LATEST);
    Handle f = file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, p.get()));
    if (!f) return fail("opening " + path);
    return f;
}

Result<Handle> open_image(const std::string &bytes, const std::string &name) {
    init();
    Handle p = fapl();
    if (!p) return fail("opening " + name);
    H5Pset_libver_bounds(p.get(), H5F_LIBVER_EARLIEST, H5F_LIBVER_LATEST);
    if (H5Pset_fapl_core(p.get(), 1 << 20, 0) < 0 ||   // in memory only, no backing file
        H5Pset_file_image(p.get(), const_cast<char *>(bytes.data()), bytes.size()) < 0)
        return fail("opening " + name);
    // HDF5 takes two files open under one name for the same file and shares them: each image
    // gets a name of its own.
    static std::atomic<std::uint64_t> images{0};
    const std::string unique = name + " (in memory, " + std::to_string(images++) + ")";
    Handle f = file(H5Fopen(unique.c_str(), H5F_ACC_RDONLY, p.get()));
    if (!f) return fail("opening " + name);
    return f;
}

Status make_parents(hid_t loc, const std::string &path) {
    std::size_t pos = 0;
    while ((pos = path.find('/', pos + 1)) != std::string::npos) {
        const std::string prefix = path.substr(0, pos);
        if (prefix.empty()) continue;
        const htri_t exists = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
        if (exists < 0) return fail("looking up group " + prefix);
        if (exists > 0) continue;
        Handle g = group(H5Gcreate2(loc, prefix.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        if (!g) return fail("creating group " + prefix);
    }
    return Status::success();
}

Status write_attr_u64(hid_t obj, const char *name, std::uint64_t value) {
    Handle s = space(H5Screate(H5S_SCALAR));
    Handle a = attr(H5Acreate2(obj, name, H5T_STD_U64LE, s.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (!a || H5Awrite(a.get(), H5T_NATIVE_UINT64, &value) < 0)
        return fail(std::string("writing attribute ") + name);
    return Status::success();
}

Status write_attr_string(hid_t obj, const char *name, const std::string &value) {
    Handle t = type(H5Tcopy(H5T_C_S1));
    if (!t || H5Tset_size(t.get(), value.empty() ? 1 : value.size()) < 0)
        return fail(std::string("writing attribute ") + name);
    H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
    Handle s = space(H5Screate(H5S_SCALAR));
    Handle a = attr(H5Acreate2(obj, name, t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT));
    std::string buf = value.empty() ? std::string(1, '\0') : value;
    if (!a || H5Awrite(a.get(), t.get(), buf.data()) < 0)
        return fail(std::string("writing attribute ") + name);
    return Status::success();
}

Result<std::uint64_t> read_attr_u64(hid_t obj, const char *name) {
    Handle a = attr(H5Aopen(obj, name, H5P_DEFAULT));
    if (!a) return fail(std::string("reading attribute ") + name);
    Handle s = space(H5Aget_space(a.get()));
    if (!s || H5Sget_simple_extent_npoints(s.get()) != 1)
        return make_error(std::string("attribute ") + name + " is not a scalar");
    Handle t = type(H5Aget_type(a.get()));
    if (!t || H5Tget_class(t.get()) != H5T_INTEGER)
        return make_error(std::string("attribute ") + name + " is not an integer");
    std::uint64_t v = 0;
    if (H5Aread(a.get(), H5T_NATIVE_UINT64, &v) < 0)
        return fail(std::string("reading attribute ") + name);
    return v;
}

namespace {
// Reads a fixed-length string from a dataset whose type is `t`, through `reader`.
Result<std::string> read_fixed_string(hid_t t, hid_t space_id, std::size_t max_len,
                                      const std::string &what,
                                      const std::function<herr_t(hid_t, void *)> &reader) {
    if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) != 0)
        return make_error(what + " is not a fixed-length string");
    if (H5Sget_simple_extent_npoints(space_id) != 1) return make_error(what + " is not a scalar");
    const std::size_t size = H5Tget_size(t);
    if (size == 0 || size > max_len)
        return make_error(what + " has " + std::to_string(size) + " bytes; at most " +
                          std::to_string(max_len) + " expected");
    std::string buf(size, '\0');
    if (reader(t, buf.data()) < 0) return fail("reading " + what);
    const auto end = buf.find('\0');
    if (end != std::string::npos) buf.resize(end);
    return buf;
}
}  // namespace

namespace {
constexpr const char *kTextChecksumAttr = "xxh3";
}  // namespace

Status write_string_dataset(hid_t loc, const char *name, const std::string &value) {
    Handle t = type(H5Tcopy(H5T_C_S1));
    if (!t || H5Tset_size(t.get(), value.empty() ? 1 : value.size()) < 0)
        return fail(std::string("writing ") + name);
    H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
    Handle s = space(H5Screate(H5S_SCALAR));
    Handle d = dataset(
        H5Dcreate2(loc, name, t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    std::string buf = value.empty() ? std::string(1, '\0') : value;
    if (!d || H5Dwrite(d.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
        return fail(std::string("writing ") + name);
    // Of the text as read back: up to the first NUL, which is where a reader stops (JSON
    // escapes every NUL, so for a manifest that is all of it).
    const std::string text = value.substr(0, value.find('\0'));
    return write_attr_u64(d.get(), kTextChecksumAttr, xxh3(text.data(), text.size()));
}

Result<std::string> read_string_dataset(hid_t loc, const char *name, std::size_t max_len) {
    Handle d = dataset(H5Dopen2(loc, name, H5P_DEFAULT));
    if (!d) return fail(std::string("opening ") + name);
    Handle t = type(H5Dget_type(d.get()));
    Handle s = space(H5Dget_space(d.get()));
    if (!t || !s) return fail(std::string("reading ") + name);
    const hid_t did = d.get();
    auto text = read_fixed_string(t.get(), s.get(), max_len, std::string("dataset ") + name,
                                  [did](hid_t tt, void *buf) {
                                      return H5Dread(did, tt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
                                  });
    if (!text) return text;
    // Required: every writer of this format writes it (omni-ckpt(5), INDEX FILE), and a text
    // without it could be any text.
    const htri_t has = H5Aexists(did, kTextChecksumAttr);
    if (has <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return make_error(std::string("metadata checksum missing (dataset ") + name + " has no " +
                          kTextChecksumAttr + " attribute)");
    }
    auto want = read_attr_u64(did, kTextChecksumAttr);
    if (!want) return make_error(std::string("metadata checksum of dataset ") + name + ": " + want.error());
    const std::uint64_t got = xxh3(text.value().data(), text.value().size());
    if (got != want.value())
        return make_error(std::string("metadata checksum mismatch (dataset ") + name + ": " +
                          kTextChecksumAttr + " attribute " + hex64(want.value()) + ", text " + hex64(got) + ")");
    return text;
}

Status write_1d(hid_t loc, const std::string &name, hid_t file_type, hid_t mem_type,
                std::uint64_t n, const void *data) {
    if (auto st = make_parents(loc, name); !st) return st;
    hsize_t dims[1] = {n};
    Handle s = space(H5Screate_simple(1, dims, nullptr));
    Handle d = dataset(H5Dcreate2(loc, name.c_str(), file_type, s.get(), H5P_DEFAULT,
                                  H5P_DEFAULT, H5P_DEFAULT));
    if (!d) return fail("creating " + name);
    if (n > 0 && H5Dwrite(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        return fail("writing " + name);
    return d.close("closing " + name);
}

namespace {
// HDF5 2.x's global lock is a pthread recursive mutex, which records its owner by kernel thread
// id: a child forked while this thread holds it (inside a callback, as below for older
// versions) finds it held by a thread id that is not its own and waits forever at its first
// HDF5 call. There the fork happens outside HDF5 instead, and the child takes the lock with
// H5TSmutex_acquire, which only tries: it gets it when no thread of the caller was inside
// HDF5 at the fork (the library's state is then consistent), and otherwise exits with
// kLockBusyExit before it has written anything, and run_isolated forks again. HDF5 1.10 and
// 1.14 keep the fork inside the callback (their lock compares pthread_self(), which a child
// keeps).
#if H5_VERS_MAJOR >= 2 && defined(H5_HAVE_THREADSAFE)
#define OMNI_H5_FORK_OUTSIDE_LOCK 1
constexpr int kLockBusyExit = 75;
// How long run_isolated keeps forking while other threads of the caller are inside HDF5.
constexpr int kLockBusyLimitMs = 10000;
#else
#define OMNI_H5_FORK_OUTSIDE_LOCK 0
#endif

struct ForkRequest {
    const std::function<void(int)> *child;
    int read_fd, write_fd;
    pid_t pid = -1;
    int err = 0;
};

[[noreturn]] void child_main(ForkRequest &req, pid_t parent) {
    ::close(req.read_fd);
    // Killed with the caller: nothing is left running HDF5 on a file nobody waits for.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(3);
    // Dies by the signal HDF5's fault raises, whatever handlers the caller installed (a
    // handler of a language runtime would run in a process that has none of its threads);
    // no core file for a fault that the caller reports.
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGPIPE, SIGTERM}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const struct rlimit no_core = {0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    // glibc's "buffer overflow detected" and HDF5's own prints are the caller's to report.
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) ::dup2(null, STDERR_FILENO);
#if OMNI_H5_FORK_OUTSIDE_LOCK
    bool locked = false;
    if (H5TSmutex_acquire(1, &locked) < 0 || !locked) ::_exit(kLockBusyExit);
#endif
    try {
        (*req.child)(req.write_fd);
    } catch (...) {
        ::_exit(2);
    }
    ::_exit(0);
}

#if !OMNI_H5_FORK_OUTSIDE_LOCK
// Forks while HDF5 holds its global lock for this thread (see run_isolated in h5.h): H5Piterate
// calls this for the first property of a list, the parent returns 1 to stop there.
herr_t fork_in_callback(hid_t, const char *, void *data) {
    auto &req = *static_cast<ForkRequest *>(data);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) child_main(req, parent);
    req.pid = pid;
    req.err = pid < 0 ? errno : 0;
    return 1;
}
#endif

Result<Isolated> run_isolated_once(const std::function<void(int fd)> &child, int idle_limit_ms) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + std::strerror(errno));
    ForkRequest req{&child, fds[0], fds[1]};
#if OMNI_H5_FORK_OUTSIDE_LOCK
    const pid_t parent = ::getpid();
    req.pid = ::fork();
    if (req.pid == 0) child_main(req, parent);
    req.err = req.pid < 0 ? errno : 0;
    ::close(fds[1]);
    if (req.pid < 0) {
        ::close(fds[0]);
        return make_error(std::string("fork: ") + std::strerror(req.err));
    }
#else
    Handle props = plist(H5Pcreate(H5P_FILE_ACCESS));
    const int it = props ? H5Piterate(props.get(), nullptr, fork_in_callback, &req) : -1;
    ::close(fds[1]);
    if (req.pid < 0) {
        ::close(fds[0]);
        if (req.err) return make_error(std::string("fork: ") + std::strerror(req.err));
        return fail("fork in an HDF5 callback (" + std::to_string(it) + ")");
    }
#endif
    Isolated out;
    using Clock = std::chrono::steady_clock;
    auto deadline = Clock::now() + std::chrono::milliseconds(idle_limit_ms);
    bool exited = false;
    int status = 0;
    char buf[1 << 16];
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            out.end = Isolated::kTimedOut;
            break;
        }
        // In slices: a descriptor copied into a process another thread forked meanwhile keeps
        // the pipe open after our child has gone, so its end is also watched for directly.
        struct pollfd p = {fds[0], POLLIN, 0};
        const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 250)));
        if (r < 0 && errno != EINTR) {
            const int err = errno;
            ::close(fds[0]);
            ::kill(req.pid, SIGKILL);
            while (::waitpid(req.pid, &status, 0) < 0 && errno == EINTR) {
            }
            return make_error(std::string("poll: ") + std::strerror(err));
        }
        if (r <= 0) {
            if (::waitpid(req.pid, &status, WNOHANG) == req.pid) {
                exited = true;
                // Whatever it wrote before it ended is in the pipe already.
                int flags = ::fcntl(fds[0], F_GETFL);
                ::fcntl(fds[0], F_SETFL, flags | O_NONBLOCK);
                ssize_t n;
                while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.output.append(buf, static_cast<std::size_t>(n));
                break;
            }
            continue;
        }
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;   // the child has closed its end: it ended
        out.output.append(buf, static_cast<std::size_t>(n));
        deadline = Clock::now() + std::chrono::milliseconds(idle_limit_ms);
    }
    ::close(fds[0]);
    if (out.end == Isolated::kTimedOut) ::kill(req.pid, SIGKILL);
    while (!exited) {
        const pid_t w = ::waitpid(req.pid, &status, 0);
        if (w == req.pid) break;
        if (w < 0 && errno == EINTR) continue;
        // No status (SIGCHLD ignored by the caller: the kernel reaped it): it ended, how is unknown.
        status = 0;
        break;
    }
    if (out.end == Isolated::kTimedOut) return out;
    if (WIFSIGNALED(status)) {
        out.end = Isolated::kSignaled;
        out.code = WTERMSIG(status);
    } else {
        out.end = Isolated::kExited;
        out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    }
    return out;
}
}  // namespace

Result<Isolated> run_isolated(const std::function<void(int fd)> &child, int idle_limit_ms) {
    init();
#if OMNI_H5_FORK_OUTSIDE_LOCK
    // A child that found the lock taken wrote nothing: fork again, a little later, until the
    // other threads leave HDF5 for an instant (between two of their calls).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLockBusyLimitMs);
    for (int pause_ms = 1;; pause_ms = std::min(pause_ms * 2, 50)) {
        auto r = run_isolated_once(child, idle_limit_ms);
        if (!r || r.value().end != Isolated::kExited || r.value().code != kLockBusyExit || !r.value().output.empty())
            return r;
        if (std::chrono::steady_clock::now() >= give_up)
            return make_error("other threads of this process were inside HDF5 at every fork for " +
                              std::to_string(kLockBusyLimitMs / 1000) + " s");
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
#else
    return run_isolated_once(child, idle_limit_ms);
#endif
}

}  // namespace h5
}  // namespace ckpt
}  // namespace omni

// A thin RAII layer over HDF5 hid_t handles, plus error-stack capture.
//
// The HDF5 C API is the only way to build virtual datasets (the C++ wrapper has no VDS), and
// every hid_t it hands out must be closed with the function matching its kind. H5Handle pairs
// the id with that function so an early return never leaks a file handle (a leaked file
// handle keeps the file open and defeats the fsync/rename commit protocol).
#ifndef OMNI_CKPT_H5_H
#define OMNI_CKPT_H5_H

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>

#include "omni/ckpt_cpp.h"
#include "omni/result.h"

namespace omni {
namespace ckpt {
namespace h5 {

using Closer = herr_t (*)(hid_t);

class Handle {
public:
    Handle() = default;
    Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    Handle(Handle &&o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
    Handle &operator=(Handle &&o) noexcept {
        if (this != &o) {
            reset();
            id_ = o.id_;
            closer_ = o.closer_;
            o.id_ = H5I_INVALID_HID;
        }
        return *this;
    }
    ~Handle() { reset(); }

    hid_t get() const { return id_; }
    bool valid() const { return id_ >= 0; }
    explicit operator bool() const { return valid(); }
    // Closes now and reports failure: closing a file is where HDF5 flushes its metadata, so
    // a full disk shows up here and must not be swallowed by a destructor.
    Status close(const std::string &what);
    void reset() {
        if (id_ >= 0 && closer_) closer_(id_);
        id_ = H5I_INVALID_HID;
    }

private:
    hid_t id_ = H5I_INVALID_HID;
    Closer closer_ = nullptr;
};

// Turns off HDF5's automatic error printing (once per process); every caller formats errors
// itself through last_error().
void init();

// Whether the HDF5 library was built thread-safe (Debian's is). Without it, only one thread
// may call HDF5 at a time and the asynchronous writer persists synchronously.
bool threadsafe();

// The current HDF5 error stack as one line, innermost cause last (it carries errno text
// such as "No space left on device").
std::string last_error();

// "<what>: <hdf5 error stack>" as an Error.
Error fail(const std::string &what);

// Handle factories: each returns an invalid Handle on failure (check with valid()).
Handle file(hid_t id);
Handle dataset(hid_t id);
Handle space(hid_t id);
Handle type(hid_t id);
Handle plist(hid_t id);
Handle group(hid_t id);
Handle attr(hid_t id);

// The HDF5 file type for a dtype (bf16 is a custom IEEE-style float so standard tools can
// convert it), and the in-memory type (identical: data is little-endian host order).
Handle dtype_type(DType t);

// File access property list with the 1.10 format (needed for virtual datasets).
Handle fapl();
// Create a file, truncating, with its metadata allocated in blocks of kMetaBlockBytes.
constexpr hsize_t kMetaBlockBytes = 64 * 1024;
Result<Handle> create_file(const std::string &path);
Result<Handle> open_file(const std::string &path);
// Closes a file written to, reporting failure. It flushes first: a flush that fails (a full
// disk) leaves HDF5's metadata cache dirty, and closing a dirty file is what HDF5 2.x builds
// with assertions on (Debian's) abort in (H5F__dest: "H5AC_cache_is_clean"); HDF5 1.10 and
// 1.14 return an error. So a failed flush discards the file (below) and returns the error.
Status close_file(Handle &f, const std::string &what);
// Closes a file whose bytes are of no use (a failed write: the caller removes it) without
// writing to it: HDF5's descriptor of the file is pointed at an anonymous memory file first,
// so the metadata flush that every close does lands there and succeeds, even on a full disk.
void discard_file(Handle &f);
// Opens a file's bytes already in memory, read-only (HDF5's core driver works on its own copy
// of them). `name` is the file's path, for messages.
Result<Handle> open_image(const std::string &bytes, const std::string &name);

// Creates the groups above `path` ("a/b/c" creates /a and /a/b) under `loc`.
Status make_parents(hid_t loc, const std::string &path);

// Attribute helpers on an object.
Status write_attr_u64(hid_t obj, const char *name, std::uint64_t value);
Status write_attr_string(hid_t obj, const char *name, const std::string &value);
Result<std::uint64_t> read_attr_u64(hid_t obj, const char *name);

// A scalar fixed-length string dataset (how the JSON manifests are stored: readable in h5dump),
// with attribute "xxh3" (uint64), the XXH3-64 of the text. The manifests are the only bytes
// of a checkpoint that no slice or rank-state checksum covers, and a flipped bit in one
// parses as easily as the original (another learning rate, another seed): reading refuses a
// dataset without the attribute or whose text does not hash to it ("metadata checksum
// mismatch"), so load, verify and show all see it.
Status write_string_dataset(hid_t loc, const char *name, const std::string &value);
Result<std::string> read_string_dataset(hid_t loc, const char *name, std::size_t max_len);

// A 1-D contiguous dataset of `n` elements of `mem_type`.
Status write_1d(hid_t loc, const std::string &name, hid_t file_type, hid_t mem_type,
                std::uint64_t n, const void *data);

// How a function run by run_isolated() ended.
struct Isolated {
    enum End { kExited, kSignaled, kTimedOut };
    End end = kExited;
    int code = 0;          // the exit status (kExited) or the signal (kSignaled)
    std::string output;    // what the child wrote to its descriptor, up to its end
};

// Runs child(fd) in a child process (fork, no exec) and returns what it wrote to `fd` and how
// it ended: the way to let HDF5 read a file that may crash it (HDF5 1.10 trusts the bytes of
// its global heap; a flipped byte there overflows buffers or loops forever) without taking
// the caller down. The child is killed once it has written nothing for `idle_limit_ms`,
// so a caller that writes a little per unit of work gets a limit that scales with the work.
// The fork happens inside an HDF5 callback, that is while this thread holds HDF5's global lock
// (thread-safe builds): no other thread of the process is inside HDF5 at that moment, so the
// child, whose only thread is this one, finds the library's state consistent and the lock its
// own. With HDF5 2.x, whose lock a child cannot take over that way, the fork happens outside
// HDF5 and the child takes the free lock itself; a child that finds it held (another thread
// was inside HDF5 at the fork) ends at once and another is forked, for up to 10 s (h5.cc).
// `child` must use nothing else that another thread may have held locked at the fork,
// and must not return into the caller: the child _exits after it. An error only when no
// child could be started.
Result<Isolated> run_isolated(const std::function<void(int fd)> &child, int idle_limit_ms);

}  // namespace h5
}  // namespace ckpt
}  // namespace omni

#endif

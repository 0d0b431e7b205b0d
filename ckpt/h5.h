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
// Create a file, truncating.
Result<Handle> create_file(const std::string &path);
Result<Handle> open_file(const std::string &path);
// Opens a file's bytes already in memory, read-only (HDF5's core driver works on its own copy
// of them). `name` is the file's path, for messages.
Result<Handle> open_image(const std::string &bytes, const std::string &name);

// Creates the groups above `path` ("a/b/c" creates /a and /a/b) under `loc`.
Status make_parents(hid_t loc, const std::string &path);

// Attribute helpers on an object.
Status write_attr_u64(hid_t obj, const char *name, std::uint64_t value);
Status write_attr_string(hid_t obj, const char *name, const std::string &value);
Result<std::uint64_t> read_attr_u64(hid_t obj, const char *name);

// A scalar fixed-length string dataset (how the JSON manifests are stored: readable in h5dump).
Status write_string_dataset(hid_t loc, const char *name, const std::string &value);
Result<std::string> read_string_dataset(hid_t loc, const char *name, std::size_t max_len);

// A 1-D contiguous dataset of `n` elements of `mem_type`.
Status write_1d(hid_t loc, const std::string &name, hid_t file_type, hid_t mem_type,
                std::uint64_t n, const void *data);

}  // namespace h5
}  // namespace ckpt
}  // namespace omni

#endif

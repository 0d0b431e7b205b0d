// What the `omni` Python module accepts as a tensor: an object with the buffer protocol
// (numpy arrays, bytearray, memoryview) or with __dlpack__ (torch tensors, CPU or CUDA), as
// one C-contiguous block of a known dtype. A Buffer holds the object's export for as long as
// it lives, so the memory stays valid while libomni uses it. Needs the GIL to be made and
// destroyed; the data pointer may be used without it.
#ifndef OMNI_PYTHON_BUFFER_H
#define OMNI_PYTHON_BUFFER_H

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace omni::python {

// The element types a buffer may hold (DLPack codes and buffer-protocol formats map here).
enum class Dtype { F32, BF16, F16, F64, I64, U8, U16, Other };
const char *dtype_name(Dtype d);  // "float32", "bfloat16", ...

class Buffer {
public:
    // Exports `obj`. `what` names the argument in errors ("allreduce(): buffer"). A writable
    // buffer is required where libomni writes into it. Raises TypeError (no buffer protocol
    // and no __dlpack__, a read-only buffer where one is written) or ValueError (not
    // C-contiguous). `stream` is what __dlpack__ gets for a CUDA tensor (-1: not passed).
    Buffer(pybind11::handle obj, const std::string &what, bool writable, std::int64_t stream = -1);
    ~Buffer();
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    Buffer(Buffer &&other) noexcept;

    void *data() const { return data_; }
    std::size_t count() const { return count_; }  // elements
    std::size_t itemsize() const { return itemsize_; }
    Dtype dtype() const { return dtype_; }
    bool cuda() const { return cuda_; }
    const std::vector<std::uint64_t> &shape() const { return shape_; }
    const std::string &what() const { return what_; }

private:
    void release() noexcept;

    std::string what_;
    bool has_view_ = false;
    Py_buffer view_{};
    void *managed_ = nullptr;  // a DLManagedTensor, deleted on release
    void *data_ = nullptr;
    std::size_t count_ = 0, itemsize_ = 0;
    Dtype dtype_ = Dtype::Other;
    bool cuda_ = false;
    std::vector<std::uint64_t> shape_;
};

}  // namespace omni::python

#endif

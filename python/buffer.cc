// Tensors from Python; see buffer.h.
#include "buffer.h"

#include <cstring>

namespace py = pybind11;

namespace omni::python {
namespace {

// The DLPack ABI (dlpack.h, versions 0.5-0.8: what PyTorch 1.13-2.x and numpy export from
// __dlpack__ as a "dltensor" capsule). Declared here from the specification: the structs
// are the stable exchange format, and Debian ships no dlpack header for C.
struct DLDevice {
    std::int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host (pinned), 13 CUDA managed
    std::int32_t device_id;
};
struct DLDataType {
    std::uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
    std::uint8_t bits;
    std::uint16_t lanes;
};
struct DLTensor {
    void *data;
    DLDevice device;
    std::int32_t ndim;
    DLDataType dtype;
    std::int64_t *shape;
    std::int64_t *strides;  // in elements; NULL: compact row-major
    std::uint64_t byte_offset;
};
struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(DLManagedTensor *self);
};
constexpr std::int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3;

Dtype from_dlpack(DLDataType t) {
    if (t.lanes != 1) return Dtype::Other;
    if (t.code == 2 && t.bits == 32) return Dtype::F32;
    if (t.code == 2 && t.bits == 16) return Dtype::F16;
    if (t.code == 2 && t.bits == 64) return Dtype::F64;
    if (t.code == 4 && t.bits == 16) return Dtype::BF16;
    if (t.code == 0 && t.bits == 64) return Dtype::I64;
    if (t.code == 1 && t.bits == 8) return Dtype::U8;
    if (t.code == 1 && t.bits == 16) return Dtype::U16;
    return Dtype::Other;
}

// A buffer-protocol format: one native-order letter, optionally after '@', '=' or '<'
// (little-endian, this library's platforms).
Dtype from_format(const char *f, std::size_t itemsize) {
    if (!f) return itemsize == 1 ? Dtype::U8 : Dtype::Other;
    if (*f == '@' || *f == '=' || *f == '<') ++f;
    if (std::strlen(f) != 1) return Dtype::Other;
    switch (*f) {
    case 'f': return itemsize == 4 ? Dtype::F32 : Dtype::Other;
    case 'e': return itemsize == 2 ? Dtype::F16 : Dtype::Other;
    case 'd': return itemsize == 8 ? Dtype::F64 : Dtype::Other;
    case 'q': case 'l': return itemsize == 8 ? Dtype::I64 : Dtype::Other;
    case 'B': return itemsize == 1 ? Dtype::U8 : Dtype::Other;
    case 'H': return itemsize == 2 ? Dtype::U16 : Dtype::Other;
    default: return Dtype::Other;
    }
}

std::size_t dtype_size(Dtype d) {
    switch (d) {
    case Dtype::F32: return 4;
    case Dtype::BF16: case Dtype::F16: case Dtype::U16: return 2;
    case Dtype::F64: case Dtype::I64: return 8;
    case Dtype::U8: return 1;
    default: return 0;
    }
}

}  // namespace

const char *dtype_name(Dtype d) {
    switch (d) {
    case Dtype::F32: return "float32";
    case Dtype::BF16: return "bfloat16";
    case Dtype::F16: return "float16";
    case Dtype::F64: return "float64";
    case Dtype::I64: return "int64";
    case Dtype::U8: return "uint8";
    case Dtype::U16: return "uint16";
    default: return "an unsupported type";
    }
}

Buffer::Buffer(py::handle obj, const std::string &what, bool writable, std::int64_t stream) : what_(what) {
    if (PyObject_CheckBuffer(obj.ptr())) {
        int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
            PyErr_Clear();
            if (writable && PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_STRIDES | PyBUF_FORMAT) == 0) {
                PyBuffer_Release(&view_);
                throw py::type_error(what + ": the buffer is read-only; expected a writable one");
            }
            throw py::type_error(what + ": cannot read the object's buffer");
        }
        has_view_ = true;
        if (!PyBuffer_IsContiguous(&view_, 'C')) {
            release();
            throw py::value_error(what + ": not C-contiguous; expected one contiguous block (numpy: "
                                         "np.ascontiguousarray, torch: .contiguous())");
        }
        dtype_ = from_format(view_.format, static_cast<std::size_t>(view_.itemsize));
        itemsize_ = static_cast<std::size_t>(view_.itemsize);
        data_ = view_.buf;
        count_ = itemsize_ ? static_cast<std::size_t>(view_.len) / itemsize_ : 0;
        for (int i = 0; i < view_.ndim; ++i) shape_.push_back(static_cast<std::uint64_t>(view_.shape[i]));
        if (view_.ndim == 0 && count_ == 1) shape_.clear();
        return;
    }
    if (!py::hasattr(obj, "__dlpack__"))
        throw py::type_error(what + ": a " + std::string(py::str(py::type::of(obj).attr("__name__"))) +
                             " is not a tensor; expected an object with the buffer protocol (a numpy array) or "
                             "__dlpack__ (a torch tensor)");
    py::object cap = stream >= 0 ? obj.attr("__dlpack__")(py::arg("stream") = stream) : obj.attr("__dlpack__")();
    auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    if (!m) {
        PyErr_Clear();
        throw py::type_error(what + ": __dlpack__ returned no 'dltensor' capsule");
    }
    // Consumed: the capsule's own destructor must not free it again.
    PyCapsule_SetName(cap.ptr(), "used_dltensor");
    managed_ = m;
    const DLTensor &t = m->dl_tensor;
    const std::int32_t dev = t.device.device_type;
    if (dev != kDLCPU && dev != kDLCUDA && dev != kDLCUDAHost) {
        release();
        throw py::type_error(what + ": a tensor on device type " + std::to_string(dev) +
                             "; expected CPU or CUDA memory");
    }
    cuda_ = dev == kDLCUDA;
    dtype_ = from_dlpack(t.dtype);
    itemsize_ = dtype_size(dtype_);
    if (itemsize_ == 0) itemsize_ = (t.dtype.bits * t.dtype.lanes + 7u) / 8u;
    std::uint64_t n = 1, expect = 1;
    bool contiguous = true;
    for (int i = t.ndim - 1; i >= 0; --i) {
        if (t.shape[i] < 0) contiguous = false;
        if (t.strides && t.shape[i] != 1 && t.strides[i] != static_cast<std::int64_t>(expect)) contiguous = false;
        expect *= static_cast<std::uint64_t>(t.shape[i] < 0 ? 0 : t.shape[i]);
    }
    for (int i = 0; i < t.ndim; ++i) {
        shape_.push_back(static_cast<std::uint64_t>(t.shape[i] < 0 ? 0 : t.shape[i]));
        n *= shape_.back();
    }
    if (!contiguous) {
        release();
        throw py::value_error(what + ": not C-contiguous; expected one contiguous block (torch: .contiguous())");
    }
    count_ = static_cast<std::size_t>(n);
    data_ = static_cast<char *>(t.data) + t.byte_offset;
}

Buffer::Buffer(Buffer &&o) noexcept
    : what_(std::move(o.what_)), has_view_(o.has_view_), view_(o.view_), managed_(o.managed_), data_(o.data_),
      count_(o.count_), itemsize_(o.itemsize_), dtype_(o.dtype_), cuda_(o.cuda_), shape_(std::move(o.shape_)) {
    o.has_view_ = false;
    o.managed_ = nullptr;
}

Buffer::~Buffer() { release(); }

void Buffer::release() noexcept {
    if (has_view_) PyBuffer_Release(&view_);
    has_view_ = false;
    if (managed_) {
        auto *m = static_cast<DLManagedTensor *>(managed_);
        if (m->deleter) m->deleter(m);
    }
    managed_ = nullptr;
}

}  // namespace omni::python

// omni._omni: the Python binding of libomni (omni/omni.h) and libomni-ckpt (omni/ckpt.h).
// The `omni` package (omni/__init__.py) re-exports it; omni-python(3) documents it.
//
// Rules kept throughout:
//  - every C call's status becomes a Python exception naming the function and libomni's
//    message (ESTATE -> omni.StateError, ECOMM -> omni.CommError, EINVAL/ERANGE/EFORMAT ->
//    omni.InvalidArgument, EIO/ENOENT -> omni.CheckpointError, ENOMEM -> MemoryError);
//  - integers from Python are range-checked here and refused naming the argument, before
//    any C call sees them (no silent wrap-around of a negative or huge count);
//  - calls that may block (init, start, boundary, collectives, checkpoint I/O) release the
//    GIL, so other Python threads run meanwhile;
//  - memory libomni keeps a pointer to (the registered parameters) is held alive here
//    until it is replaced or the runtime finalised.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gloo/transport/device.h>

#include "buffer.h"
#include "omni/ckpt.h"
#include "omni/omni.h"
#include "workload/workload.h"

namespace py = pybind11;
using omni::python::Buffer;
using omni::python::Dtype;

namespace {

PyObject *g_error = nullptr, *g_state = nullptr, *g_comm = nullptr, *g_invalid = nullptr, *g_ckpt = nullptr;

[[noreturn]] void raise(int rc, const std::string &fn, const char *message) {
    std::string text = fn + ": " + (message && *message ? message : "failed (no message)");
    PyObject *type = g_error;
    switch (rc) {
    case OMNI_ESTATE: type = g_state; break;
    case OMNI_ECOMM: type = g_comm; break;
    case OMNI_EINVAL: case OMNI_ERANGE: case OMNI_EFORMAT: type = g_invalid; break;
    case OMNI_EIO: case OMNI_ENOENT: type = g_ckpt; break;
    case OMNI_ENOMEM: type = PyExc_MemoryError; break;
    default: break;
    }
    PyErr_SetString(type, text.c_str());
    throw py::error_already_set();
}

void check(int rc, const char *fn) {
    if (rc != OMNI_OK) raise(rc, fn, omni_last_error());
}
void check_ckpt(int rc, const char *fn) {
    if (rc != OMNI_OK) raise(rc, fn, omni_ckpt_last_error());
}

// A Python integer in [lo, hi], or a ValueError/TypeError naming `name`.
std::uint64_t to_u64(py::handle v, const char *name, std::uint64_t lo, std::uint64_t hi) {
    if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr()))
        throw py::type_error(std::string(name) + ": expected an integer, got a " +
                             std::string(py::str(py::type::of(v).attr("__name__"))));
    int overflow = 0;
    long long s = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow < 0 || (!overflow && s < 0))
        throw py::value_error(std::string(name) + ": " + std::string(py::str(v)) + " is negative; expected an integer in " +
                              std::to_string(lo) + ".." + std::to_string(hi));
    unsigned long long u = overflow ? PyLong_AsUnsignedLongLong(v.ptr()) : static_cast<unsigned long long>(s);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        u = ULLONG_MAX;
    }
    if (u < lo || u > hi)
        throw py::value_error(std::string(name) + ": " + std::string(py::str(v)) + " is out of range; expected an integer in " +
                              std::to_string(lo) + ".." + std::to_string(hi));
    return u;
}

// ---- collectives ---------------------------------------------------------------------------

// The CUDA stream set with set_cuda_stream (what __dlpack__ of a CUDA tensor syncs to).
std::int64_t g_stream = -1;

// The libomni dtype of a buffer for a collective: float32 or bfloat16 (a numpy uint16 array
// only with dtype="bf16", numpy having no bfloat16).
int collective_dtype(const Buffer &b, const std::optional<std::string> &dtype) {
    if (dtype && *dtype != "fp32" && *dtype != "bf16" && *dtype != "int64")
        throw py::value_error("dtype '" + *dtype + "': expected 'fp32', 'bf16' or 'int64'");
    if (b.dtype() == Dtype::F32 && (!dtype || *dtype == "fp32")) return OMNI_FP32;
    if (b.dtype() == Dtype::I64 && (!dtype || *dtype == "int64")) return OMNI_INT64;
    if ((b.dtype() == Dtype::BF16 && (!dtype || *dtype == "bf16")) || (b.dtype() == Dtype::U16 && dtype && *dtype == "bf16"))
        return OMNI_BF16;
    throw py::type_error(b.what() + ": " + omni::python::dtype_name(b.dtype()) +
                         (dtype ? " with dtype='" + *dtype + "'" : std::string()) +
                         "; expected float32, int64, or bfloat16 (a torch.bfloat16 tensor, or numpy uint16 with "
                         "dtype='bf16')");
}

int reduce_op(const std::string &op) {
    if (op == "sum") return OMNI_SUM;
    if (op == "avg" || op == "mean") return OMNI_AVG;
    throw py::value_error("op '" + op + "': expected 'sum' or 'avg'");
}

int group_id(py::handle g) {
    std::uint64_t v = to_u64(g, "group", 0, 0x1ffff);
    return static_cast<int>(v);
}

void check_device(const Buffer &b) {
    if (!b.cuda()) return;
    const char *backend = omni_backend();
    if (!backend || std::strcmp(backend, "nccl") != 0)
        throw py::type_error(b.what() + ": a CUDA tensor needs the NCCL backend (OMNI_COMM_BACKEND=nccl); this rank's is " +
                             std::string(backend ? backend : "none (not initialised)"));
}

void allreduce(py::handle buf, const std::string &op, py::handle group, std::optional<std::string> dtype) {
    Buffer b(buf, "allreduce(): buffer", true, g_stream);
    int dt = collective_dtype(b, dtype), o = reduce_op(op), g = group_id(group);
    check_device(b);
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_group_allreduce(g, b.data(), b.count(), dt, o);
    }
    check(rc, "allreduce()");
}

void broadcast(py::handle buf, py::handle root, py::handle group, std::optional<std::string> dtype) {
    Buffer b(buf, "broadcast(): buffer", true, g_stream);
    int dt = collective_dtype(b, dtype), g = group_id(group);
    auto r = static_cast<std::uint32_t>(to_u64(root, "root", 0, UINT32_MAX));
    check_device(b);
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_group_broadcast(g, b.data(), b.count(), dt, r);
    }
    check(rc, "broadcast()");
}

// The group's size, for the shapes of allgather and reduce_scatter.
std::uint32_t group_size(int g, const char *fn) {
    std::uint32_t rank = 0, size = 0;
    check(omni_group_info(g, &rank, &size), fn);
    return size;
}

void allgather(py::handle send, py::handle recv, py::handle group, std::optional<std::string> dtype) {
    Buffer s(send, "allgather(): send", false, g_stream), r(recv, "allgather(): recv", true, g_stream);
    int dt = collective_dtype(s, dtype), g = group_id(group);
    if (collective_dtype(r, dtype) != dt) throw py::type_error("allgather(): send and recv differ in dtype");
    check_device(s);
    check_device(r);
    const std::uint32_t n = group_size(g, "allgather()");
    if (r.count() != std::uint64_t(s.count()) * n)
        throw py::value_error("allgather(): recv holds " + std::to_string(r.count()) + " elements; expected " +
                              std::to_string(n) + " x " + std::to_string(s.count()) + " (the group's size times send's)");
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_group_allgather(g, s.data(), r.data(), s.count(), dt);
    }
    check(rc, "allgather()");
}

void reduce_scatter(py::handle send, py::handle recv, const std::string &op, py::handle group,
                    std::optional<std::string> dtype) {
    Buffer s(send, "reduce_scatter(): send", false, g_stream), r(recv, "reduce_scatter(): recv", true, g_stream);
    int dt = collective_dtype(s, dtype), o = reduce_op(op), g = group_id(group);
    if (collective_dtype(r, dtype) != dt) throw py::type_error("reduce_scatter(): send and recv differ in dtype");
    check_device(s);
    check_device(r);
    const std::uint32_t n = group_size(g, "reduce_scatter()");
    if (s.count() != std::uint64_t(r.count()) * n)
        throw py::value_error("reduce_scatter(): send holds " + std::to_string(s.count()) + " elements; expected " +
                              std::to_string(n) + " x " + std::to_string(r.count()) + " (the group's size times recv's)");
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_group_reduce_scatter(g, s.data(), r.data(), r.count(), dt, o);
    }
    check(rc, "reduce_scatter()");
}

void barrier(py::handle group) {
    int g = group_id(group), rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_group_barrier(g);
    }
    check(rc, "barrier()");
}

// ---- the runtime ---------------------------------------------------------------------------

// What libomni keeps a pointer to: the registered parameters. Leaked on purpose at exit (its
// destructor would run after the interpreter is gone).
std::unique_ptr<Buffer> *g_params = new std::unique_ptr<Buffer>();
// The cost callable of data_balance, and an exception it raised inside a C call.
py::object *g_cost = new py::object();
py::object *g_cost_error = new py::object();

void init() {
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_init();
    }
    check(rc, "init()");
}

void finalize() {
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_finalize();
    }
    g_params->reset();
    *g_cost = py::object();
    check(rc, "finalize()");
}

void register_params(py::handle buf) {
    auto b = std::make_unique<Buffer>(buf, "register_params(): params", true);
    if (b->dtype() != Dtype::F32)
        throw py::type_error(std::string("register_params(): params: ") + omni::python::dtype_name(b->dtype()) +
                             "; expected float32 in host memory");
    if (b->cuda()) throw py::type_error("register_params(): params: a CUDA tensor; expected host memory");
    check(omni_register_params(static_cast<float *>(b->data()), b->count()), "register_params()");
    *g_params = std::move(b);
}

py::tuple start() {
    std::uint64_t step = 0;
    int rewind = 0, rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_start(&step, &rewind);
    }
    check(rc, "start()");
    return py::make_tuple(step, rewind != 0);
}

omni_decision boundary(py::handle step) {
    const std::uint64_t s = to_u64(step, "step", 0, UINT64_MAX);
    omni_decision d{};
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_boundary(s, &d);
    }
    check(rc, "boundary()");
    return d;
}

std::uint64_t state_add(py::handle length) {
    std::size_t index = 0;
    check(omni_state_add(static_cast<std::size_t>(to_u64(length, "length", 0, SIZE_MAX / sizeof(float))), &index),
          "state_add()");
    return index;
}

// A copy of this rank's shard of vector `index`: (begin, float32 array). A copy, not a view:
// the runtime moves the shard at every reshape, and a view kept past it would read freed
// memory.
py::tuple get_state_shard(py::handle index) {
    float *data = nullptr;
    std::size_t begin = 0, count = 0;
    check(omni_state_shard(static_cast<std::size_t>(to_u64(index, "index", 0, 63)), &data, &begin, &count),
          "get_state_shard()");
    py::array_t<float> out(count);
    if (count) std::memcpy(out.mutable_data(), data, count * sizeof(float));
    return py::make_tuple(begin, out);
}

void set_state_shard(py::handle index, py::handle values) {
    float *data = nullptr;
    std::size_t begin = 0, count = 0;
    check(omni_state_shard(static_cast<std::size_t>(to_u64(index, "index", 0, 63)), &data, &begin, &count),
          "set_state_shard()");
    Buffer b(values, "set_state_shard(): values", false);
    if (b.dtype() != Dtype::F32 || b.cuda())
        throw py::type_error(std::string("set_state_shard(): values: ") + omni::python::dtype_name(b.dtype()) +
                             "; expected float32 in host memory");
    if (b.count() != count)
        throw py::value_error("set_state_shard(): values hold " + std::to_string(b.count()) +
                              " elements; this rank's shard has " + std::to_string(count));
    if (count) std::memcpy(data, b.data(), count * sizeof(float));
}

// ---- the program's store -------------------------------------------------------------------

void store_set(py::handle generation, const std::string &key, py::bytes value) {
    const std::uint64_t g = to_u64(generation, "generation", 0, UINT64_MAX);
    std::string v = value;
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_store_set(g, key.c_str(), v.data(), v.size());
    }
    check(rc, "store_set()");
}

py::bytes store_get(py::handle generation, const std::string &key, py::handle timeout_ms) {
    const std::uint64_t g = to_u64(generation, "generation", 0, UINT64_MAX);
    const auto t = static_cast<std::int64_t>(to_u64(timeout_ms, "timeout_ms", 0, std::uint64_t(24) * 3600 * 1000));
    std::string buf(4096, '\0');
    for (;;) {
        std::size_t len = 0;
        int rc;
        {
            py::gil_scoped_release nogil;
            rc = omni_store_get(g, key.c_str(), buf.data(), buf.size(), &len, t);
        }
        if (rc == OMNI_ERANGE && len > buf.size()) {
            buf.resize(len);
            continue;
        }
        check(rc, "store_get()");
        return py::bytes(buf.data(), len);
    }
}

std::int64_t store_add(py::handle generation, const std::string &key, py::handle amount) {
    const std::uint64_t g = to_u64(generation, "generation", 0, UINT64_MAX);
    if (!PyLong_Check(amount.ptr()) || PyBool_Check(amount.ptr()))
        throw py::type_error("amount: expected an integer, got a " +
                             std::string(py::str(py::type::of(amount).attr("__name__"))));
    int overflow = 0;
    const long long a = PyLong_AsLongLongAndOverflow(amount.ptr(), &overflow);
    constexpr long long kMax = 1LL << 62;
    if (overflow || a > kMax || a < -kMax)
        throw py::value_error("amount: " + std::string(py::str(amount)) + " is beyond +-2^62");
    const std::int64_t amt = a;
    std::int64_t value = 0;
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_store_add(g, key.c_str(), amt, &value);
    }
    check(rc, "store_add()");
    return value;
}

void store_wait(py::handle generation, const std::vector<std::string> &keys, py::handle timeout_ms) {
    const std::uint64_t g = to_u64(generation, "generation", 0, UINT64_MAX);
    const auto t = static_cast<std::int64_t>(to_u64(timeout_ms, "timeout_ms", 0, std::uint64_t(24) * 3600 * 1000));
    std::vector<const char *> ks;
    for (const auto &k : keys) ks.push_back(k.c_str());
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_store_wait(g, ks.data(), ks.size(), t);
    }
    check(rc, "store_wait()");
}

// ---- data ----------------------------------------------------------------------------------

py::array_t<std::uint64_t> indices_array(const std::vector<std::uint64_t> &v) {
    py::array_t<std::uint64_t> out(v.size());
    if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(std::uint64_t));
    return out;
}

void raise_cost_error() {
    if (!*g_cost_error) return;
    py::object e = std::move(*g_cost_error);
    *g_cost_error = py::object();
    PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(e.ptr())), e.ptr());
    throw py::error_already_set();
}

// The C cost callback: calls the Python callable with the GIL. An exception it raises is
// kept and raised once the C call returns (it cannot cross libomni); its sample costs 0.
std::uint64_t call_cost(std::uint64_t index, std::uint64_t step, void *) {
    py::gil_scoped_acquire gil;
    if (*g_cost_error) return 0;
    try {
        py::object r = (*g_cost)(index, step);
        return to_u64(r, "cost(index, step)", 0, std::uint64_t(1) << 40);
    } catch (py::error_already_set &e) {
        *g_cost_error = e.value();
    } catch (const std::exception &e) {
        *g_cost_error = py::reinterpret_steal<py::object>(PyObject_CallFunction(PyExc_ValueError, "s", e.what()));
    }
    return 0;
}

py::array_t<std::uint64_t> data_micro_batch(py::handle micro) {
    const auto m = static_cast<std::uint32_t>(to_u64(micro, "micro", 0, UINT32_MAX));
    std::vector<std::uint64_t> idx(64);
    std::size_t count = 0;
    for (;;) {
        int rc;
        {
            py::gil_scoped_release nogil;
            rc = omni_data_micro_batch(m, idx.data(), idx.size(), &count);
        }
        raise_cost_error();
        if (rc == OMNI_ERANGE && count > idx.size()) {
            idx.resize(count);
            continue;
        }
        check(rc, "data_micro_batch()");
        idx.resize(count);
        return indices_array(idx);
    }
}

py::tuple data_step_samples() {
    std::vector<std::uint64_t> idx(256);
    std::size_t count = 0;
    double time = 0;
    for (;;) {
        int rc;
        {
            py::gil_scoped_release nogil;
            rc = omni_data_step_samples(idx.data(), idx.size(), &count, &time);
        }
        raise_cost_error();
        if (rc == OMNI_ERANGE && count > idx.size()) {
            idx.resize(count);
            continue;
        }
        check(rc, "data_step_samples()");
        idx.resize(count);
        return py::make_tuple(indices_array(idx), time);
    }
}

void data_balance(const std::string &policy, py::object cost) {
    if (!cost.is_none() && !PyCallable_Check(cost.ptr()))
        throw py::type_error("data_balance(): cost: expected a callable cost(index, step) -> int, or None");
    *g_cost = cost;
    check(omni_data_balance(policy.c_str(), cost.is_none() ? nullptr : call_cost, nullptr), "data_balance()");
}

std::string data_save() {
    std::size_t len = 0;
    int rc = omni_data_save(nullptr, 0, &len);
    if (rc != OMNI_ERANGE && rc != OMNI_OK) check(rc, "data_save()");
    std::string out(len, '\0');
    check(omni_data_save(out.data(), out.size(), &len), "data_save()");
    out.resize(len ? len - 1 : 0);  // without the NUL
    return out;
}

// ---- the stand-alone ledger ------------------------------------------------------------------

struct Ledger {
    omni_ledger *h = nullptr;
    ~Ledger() { omni_ledger_destroy(h); }
    omni_ledger *get() const {
        if (!h) throw py::value_error("Ledger: not initialised");
        return h;
    }
};

std::unique_ptr<Ledger> ledger_new(py::handle dataset_size, py::handle global_batch, py::handle micro_batch,
                                   py::handle seed, py::handle dp_size) {
    auto l = std::make_unique<Ledger>();
    check(omni_ledger_create(to_u64(dataset_size, "dataset_size", 1, std::uint64_t(1) << 48),
                             to_u64(global_batch, "global_batch", 1, std::uint64_t(1) << 40),
                             to_u64(micro_batch, "micro_batch", 1, std::uint64_t(1) << 40),
                             to_u64(seed, "seed", 0, UINT64_MAX),
                             static_cast<std::uint32_t>(to_u64(dp_size, "dp_size", 1, std::uint64_t(1) << 20)), &l->h),
          "Ledger()");
    return l;
}

// ---- checkpoints ---------------------------------------------------------------------------

omni_ckpt_dtype ckpt_dtype(const Buffer &b, const std::optional<std::string> &dtype) {
    if (dtype && *dtype == "bf16" && (b.dtype() == Dtype::U16 || b.dtype() == Dtype::BF16)) return OMNI_CKPT_BF16;
    if (dtype && *dtype != "bf16")
        throw py::value_error("dtype '" + *dtype + "': expected 'bf16' (for numpy uint16 holding bfloat16) or none");
    switch (b.dtype()) {
    case Dtype::F32: return OMNI_CKPT_FP32;
    case Dtype::BF16: return OMNI_CKPT_BF16;
    case Dtype::F16: return OMNI_CKPT_FP16;
    case Dtype::I64: return OMNI_CKPT_INT64;
    case Dtype::U8: return OMNI_CKPT_UINT8;
    default:
        throw py::type_error(b.what() + ": " + omni::python::dtype_name(b.dtype()) +
                             "; expected float32, bfloat16, float16, int64 or uint8");
    }
}

std::vector<std::uint64_t> dims(py::handle v, const char *name) {
    std::vector<std::uint64_t> out;
    if (!py::isinstance<py::sequence>(v) || py::isinstance<py::str>(v))
        throw py::type_error(std::string(name) + ": expected a sequence of integers");
    for (auto item : py::reinterpret_borrow<py::sequence>(v)) out.push_back(to_u64(item, name, 0, std::uint64_t(1) << 62));
    if (out.empty() || out.size() > 8)
        throw py::value_error(std::string(name) + ": " + std::to_string(out.size()) + " dimensions; expected 1..8");
    return out;
}

omni_ckpt_change change_mode(const std::string &c) {
    if (c == "detect") return OMNI_CKPT_DETECT;
    if (c == "changed") return OMNI_CKPT_CHANGED;
    if (c == "unchanged") return OMNI_CKPT_UNCHANGED;
    throw py::value_error("change '" + c + "': expected 'detect', 'changed' or 'unchanged'");
}

struct Writer {
    omni_ckpt_writer *h = nullptr;
    bool finished = false;
    ~Writer() { omni_ckpt_writer_free(h); }
    omni_ckpt_writer *get() const {
        if (!h) throw py::value_error("CheckpointWriter: closed");
        if (finished) throw py::value_error("CheckpointWriter: finished; open a new one for the next checkpoint");
        return h;
    }
};

std::unique_ptr<Writer> writer_open(const std::string &root, py::handle step, py::handle rank,
                                    std::optional<std::string> attempt, std::optional<std::string> base) {
    auto w = std::make_unique<Writer>();
    const std::uint64_t s = to_u64(step, "step", 0, UINT64_MAX);
    const auto r = static_cast<std::uint32_t>(to_u64(rank, "rank", 0, UINT32_MAX));
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_ckpt_writer_open(root.c_str(), s, r, attempt ? attempt->c_str() : nullptr,
                                   base ? base->c_str() : nullptr, &w->h);
    }
    check_ckpt(rc, "CheckpointWriter()");
    return w;
}

void writer_add_tensor(Writer &w, const std::string &name, py::handle data, py::object shape, py::object offset,
                       const std::string &change, std::optional<std::string> dtype) {
    Buffer b(data, "add_tensor(): " + name, false);
    if (b.cuda()) throw py::type_error("add_tensor(): " + name + ": a CUDA tensor; expected host memory (.cpu())");
    const omni_ckpt_dtype dt = ckpt_dtype(b, dtype);
    std::vector<std::uint64_t> count = b.shape().empty() ? std::vector<std::uint64_t>{1} : b.shape();
    std::vector<std::uint64_t> full = shape.is_none() ? count : dims(shape, "shape");
    std::vector<std::uint64_t> off = offset.is_none() ? std::vector<std::uint64_t>(full.size(), 0) : dims(offset, "offset");
    if (full.size() != count.size() || off.size() != count.size())
        throw py::value_error("add_tensor(): " + name + ": data has " + std::to_string(count.size()) + " dimension(s), shape " +
                              std::to_string(full.size()) + " and offset " + std::to_string(off.size()) +
                              "; expected the same number");
    const omni_ckpt_change c = change_mode(change);
    omni_ckpt_writer *h = w.get();
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_ckpt_writer_add_tensor(h, name.c_str(), dt, static_cast<std::uint32_t>(count.size()), full.data(),
                                         off.data(), count.data(), b.data(), c);
    }
    check_ckpt(rc, "add_tensor()");
}

void writer_add_rank_state(Writer &w, py::handle rank, py::bytes rng, py::handle consumed) {
    const auto r = static_cast<std::uint32_t>(to_u64(rank, "rank", 0, UINT32_MAX));
    std::string rng_bytes = rng;
    std::optional<Buffer> c;
    if (!consumed.is_none()) {
        c.emplace(consumed, "add_rank_state(): consumed", false);
        if (c->dtype() != Dtype::I64 || c->cuda())
            throw py::type_error(std::string("add_rank_state(): consumed: ") + omni::python::dtype_name(c->dtype()) +
                                 "; expected int64 in host memory");
    }
    check_ckpt(omni_ckpt_writer_add_rank_state(w.get(), r, rng_bytes.data(), rng_bytes.size(),
                                               c ? static_cast<const std::int64_t *>(c->data()) : nullptr,
                                               c ? c->count() : 0),
               "add_rank_state()");
}

void writer_finish(Writer &w) {
    omni_ckpt_writer *h = w.get();
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_ckpt_writer_finish(h);
    }
    check_ckpt(rc, "finish()");
    w.finished = true;
}

void abandon(const std::string &root, py::handle step, std::optional<std::string> attempt) {
    const auto s = to_u64(step, "step", 0, UINT64_MAX);
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_ckpt_abandon(root.c_str(), s, attempt ? attempt->c_str() : nullptr);
    }
    check_ckpt(rc, "abandon()");
}

std::string commit(const std::string &root, py::handle writers, std::optional<std::string> attempt, py::dict meta) {
    const auto n = static_cast<std::uint32_t>(to_u64(writers, "writers", 1, UINT32_MAX));
    omni_ckpt_meta m{};
    std::string layout, lr_kind;
    for (auto [k, v] : meta) {
        const std::string key = py::str(k);
        if (key == "step") m.step = to_u64(v, "meta['step']", 0, UINT64_MAX);
        else if (key == "generation") m.generation = to_u64(v, "meta['generation']", 0, UINT64_MAX);
        else if (key == "world_size") m.world_size = to_u64(v, "meta['world_size']", 0, UINT64_MAX);
        else if (key == "unit_layout") layout = py::str(v);
        else if (key == "lr_kind") lr_kind = py::str(v);
        else if (key == "lr_base") m.lr_base = py::cast<double>(v);
        else if (key == "lr_warmup_steps") m.lr_warmup_steps = to_u64(v, "meta['lr_warmup_steps']", 0, UINT64_MAX);
        else if (key == "lr_total_steps") m.lr_total_steps = to_u64(v, "meta['lr_total_steps']", 0, UINT64_MAX);
        else if (key == "lr_last_step") m.lr_last_step = to_u64(v, "meta['lr_last_step']", 0, UINT64_MAX);
        else if (key == "epoch") m.epoch = to_u64(v, "meta['epoch']", 0, UINT64_MAX);
        else if (key == "seed") m.seed = to_u64(v, "meta['seed']", 0, UINT64_MAX);
        else
            throw py::value_error("commit(): meta key '" + key +
                                  "': expected step, generation, world_size, unit_layout, lr_kind, lr_base, "
                                  "lr_warmup_steps, lr_total_steps, lr_last_step, epoch or seed");
    }
    m.unit_layout = layout.empty() ? nullptr : layout.c_str();
    m.lr_kind = lr_kind.empty() ? nullptr : lr_kind.c_str();
    std::vector<char> path(4096);
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_ckpt_commit(root.c_str(), n, attempt ? attempt->c_str() : nullptr, &m, path.data(), path.size());
    }
    check_ckpt(rc, "commit()");
    return std::string(path.data());
}

struct Reader {
    omni_ckpt_reader *h = nullptr;
    ~Reader() { omni_ckpt_reader_close(h); }
    omni_ckpt_reader *get() const {
        if (!h) throw py::value_error("CheckpointReader: closed");
        return h;
    }
};

std::unique_ptr<Reader> reader_open(const std::string &path, bool latest, bool verify) {
    auto r = std::make_unique<Reader>();
    int rc;
    {
        py::gil_scoped_release nogil;
        rc = omni_ckpt_reader_open(path.c_str(), latest ? 1 : 0, verify ? 1 : 0, &r->h);
    }
    check_ckpt(rc, "CheckpointReader()");
    return r;
}

const char *ckpt_dtype_name(omni_ckpt_dtype d) {
    switch (d) {
    case OMNI_CKPT_FP32: return "float32";
    case OMNI_CKPT_BF16: return "bfloat16";
    case OMNI_CKPT_FP16: return "float16";
    case OMNI_CKPT_INT64: return "int64";
    case OMNI_CKPT_UINT8: return "uint8";
    default: return "unknown";
    }
}

py::dict reader_meta(Reader &r) {
    omni_ckpt_meta m{};
    check_ckpt(omni_ckpt_reader_meta(r.get(), &m), "meta()");
    py::dict d;
    d["step"] = m.step;
    d["generation"] = m.generation;
    d["world_size"] = m.world_size;
    d["unit_layout"] = m.unit_layout ? m.unit_layout : "";
    d["lr_kind"] = m.lr_kind ? m.lr_kind : "";
    d["lr_base"] = m.lr_base;
    d["lr_warmup_steps"] = m.lr_warmup_steps;
    d["lr_total_steps"] = m.lr_total_steps;
    d["lr_last_step"] = m.lr_last_step;
    d["epoch"] = m.epoch;
    d["seed"] = m.seed;
    return d;
}

// [(name, dtype name, shape tuple)], in the checkpoint's order.
py::list reader_tensors(Reader &r) {
    py::list out;
    const std::size_t n = omni_ckpt_reader_tensor_count(r.get());
    for (std::size_t i = 0; i < n; ++i) {
        const char *name = nullptr;
        omni_ckpt_dtype dt{};
        std::uint32_t ndim = 0;
        std::uint64_t shape[8] = {};
        check_ckpt(omni_ckpt_reader_tensor_info(r.h, i, &name, &dt, &ndim, shape), "tensors()");
        py::tuple s(ndim);
        for (std::uint32_t k = 0; k < ndim; ++k) s[k] = shape[k];
        out.append(py::make_tuple(name, ckpt_dtype_name(dt), s));
    }
    return out;
}

// Reads tensor `name` (or its slice [offset, offset+count)) into a new numpy array of its
// shape; bfloat16 comes back as uint16 (numpy has no bfloat16: omni.ckpt views it).
py::array reader_read(Reader &r, const std::string &name, py::object offset, py::object count) {
    const std::size_t n = omni_ckpt_reader_tensor_count(r.get());
    for (std::size_t i = 0; i < n; ++i) {
        const char *tname = nullptr;
        omni_ckpt_dtype dt{};
        std::uint32_t ndim = 0;
        std::uint64_t shape[8] = {};
        check_ckpt(omni_ckpt_reader_tensor_info(r.h, i, &tname, &dt, &ndim, shape), "read()");
        if (name != tname) continue;
        std::vector<std::uint64_t> off = offset.is_none() ? std::vector<std::uint64_t>(ndim, 0) : dims(offset, "offset");
        std::vector<std::uint64_t> cnt = count.is_none() ? std::vector<std::uint64_t>(shape, shape + ndim) : dims(count, "count");
        if (off.size() != ndim || cnt.size() != ndim)
            throw py::value_error("read(): " + name + " has " + std::to_string(ndim) +
                                  " dimension(s); offset and count must have as many");
        py::dtype npdt;
        switch (dt) {
        case OMNI_CKPT_FP32: npdt = py::dtype::of<float>(); break;
        case OMNI_CKPT_BF16: npdt = py::dtype::of<std::uint16_t>(); break;
        case OMNI_CKPT_FP16: npdt = py::dtype("float16"); break;
        case OMNI_CKPT_INT64: npdt = py::dtype::of<std::int64_t>(); break;
        case OMNI_CKPT_UINT8: npdt = py::dtype::of<std::uint8_t>(); break;
        default: throw py::type_error("read(): " + name + ": an unknown dtype");
        }
        std::vector<py::ssize_t> pyshape;
        std::uint64_t elems = 1;
        for (std::uint64_t c : cnt) {
            // Bounded by the tensor's own shape in the C call; here only what fits in memory.
            if (c > (std::uint64_t(1) << 40) || (c && elems > (std::uint64_t(1) << 40) / c))
                throw py::value_error("read(): " + name + ": count too large");
            elems *= c;
            pyshape.push_back(static_cast<py::ssize_t>(c));
        }
        py::array out(npdt, pyshape);
        void *dst = out.mutable_data();
        const std::size_t bytes = static_cast<std::size_t>(elems) * static_cast<std::size_t>(npdt.itemsize());
        int rc;
        {
            py::gil_scoped_release nogil;
            rc = omni_ckpt_reader_read(r.h, name.c_str(), ndim, off.data(), cnt.data(), dst, bytes);
        }
        check_ckpt(rc, "read()");
        return out;
    }
    PyErr_SetString(g_ckpt, ("read(): the checkpoint holds no tensor '" + name + "'").c_str());
    throw py::error_already_set();
}

py::tuple reader_rank_state(Reader &r, py::handle rank) {
    const auto k = static_cast<std::uint32_t>(to_u64(rank, "rank", 0, UINT32_MAX));
    std::size_t rng_bytes = 0, n = 0;
    check_ckpt(omni_ckpt_reader_rank_state(r.get(), k, nullptr, &rng_bytes, nullptr, &n), "rank_state()");
    std::string rng(rng_bytes, '\0');
    py::array_t<std::int64_t> consumed(n);
    check_ckpt(omni_ckpt_reader_rank_state(r.h, k, rng.data(), &rng_bytes, consumed.mutable_data(), &n), "rank_state()");
    return py::make_tuple(py::bytes(rng.data(), rng_bytes), consumed);
}

// ---- synthetic workloads ---------------------------------------------------------------------

// omni-workload(5): a sample's modality and length as a pure function of (seed, index, step).
struct Workload {
    omni::workload::Workload w;
};

std::unique_ptr<Workload> workload_load(const std::string &path_or_preset) {
    auto w = omni::workload::Workload::load(path_or_preset);
    if (!w) {
        PyErr_SetString(g_invalid, ("Workload(): " + w.error()).c_str());
        throw py::error_already_set();
    }
    return std::make_unique<Workload>(Workload{std::move(w).value()});
}

py::list workload_modalities(const Workload &w) {
    py::list out;
    for (const auto &m : w.w.modalities()) {
        py::dict d;
        d["name"] = m.name;
        d["unit"] = m.unit;
        d["mean_length"] = m.length.mean();
        d["tokens_per_unit"] = m.tokens_per_unit;
        d["encoder_cost_per_unit"] = m.encoder_cost_per_unit;
        out.append(d);
    }
    return out;
}

py::tuple workload_sample(const Workload &w, py::handle seed, py::handle index, py::handle step) {
    auto s = w.w.sample(to_u64(seed, "seed", 0, UINT64_MAX), to_u64(index, "index", 0, UINT64_MAX),
                        to_u64(step, "step", 0, UINT64_MAX));
    return py::make_tuple(s.modality, s.length);
}

std::uint64_t workload_cost(const Workload &w, py::handle seed, py::handle index, py::handle step,
                            const std::string &kind) {
    auto k = omni::workload::parse_cost_kind(kind);
    if (!k) throw py::value_error("cost(): " + k.error());
    return w.w.cost(to_u64(seed, "seed", 0, UINT64_MAX), to_u64(index, "index", 0, UINT64_MAX),
                    to_u64(step, "step", 0, UINT64_MAX), k.value());
}

}  // namespace

PYBIND11_MODULE(_omni, m) {
    m.doc() = "libomni and libomni-ckpt for Python (omni-python(3)); import the 'omni' package instead";

    g_error = PyErr_NewExceptionWithDoc("omni.Error", "A libomni call failed.", PyExc_RuntimeError, nullptr);
    g_state = PyErr_NewExceptionWithDoc("omni.StateError",
                                        "Called in the wrong state: before init(), before start(), after the job "
                                        "stopped or this rank left.",
                                        g_error, nullptr);
    g_comm = PyErr_NewExceptionWithDoc("omni.CommError",
                                       "The coordinator or a peer failed (refused, timed out, lost): this rank "
                                       "cannot go on in the job.",
                                       g_error, nullptr);
    {
        py::tuple bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
        g_invalid = PyErr_NewExceptionWithDoc("omni.InvalidArgument", "An argument libomni refused.",
                                              bases.ptr(), nullptr);
        py::tuple cbases = py::make_tuple(py::handle(g_error), py::handle(PyExc_OSError));
        g_ckpt = PyErr_NewExceptionWithDoc("omni.CheckpointError",
                                           "A checkpoint could not be written or read, or is not valid.",
                                           cbases.ptr(), nullptr);
    }
    m.attr("Error") = py::handle(g_error);
    m.attr("StateError") = py::handle(g_state);
    m.attr("CommError") = py::handle(g_comm);
    m.attr("InvalidArgument") = py::handle(g_invalid);
    m.attr("CheckpointError") = py::handle(g_ckpt);

    // The runtime.
    m.def("init", &init, "Joins the job (omni_init): PMIx, the coordinator, the communicator.");
    m.def("finalize", &finalize, "Leaves the runtime (omni_finalize); idempotent.");
    m.def("rank", [] { std::uint32_t v = 0; check(omni_rank(&v), "rank()"); return v; });
    m.def("world_size", [] { std::uint32_t v = 0; check(omni_world_size(&v), "world_size()"); return v; });
    m.def("unit", [] {
        std::uint32_t u = 0, s = 0;
        check(omni_unit(&u, &s), "unit()");
        return py::make_tuple(u, s);
    }, "(unit, slot) of this rank.");
    m.def("generation", [] { std::uint64_t v = 0; check(omni_generation(&v), "generation()"); return v; });
    m.def("standalone", [] { int v = 0; check(omni_standalone(&v), "standalone()"); return v != 0; });
    m.def("backend", [] {
        const char *b = omni_backend();
        return b ? py::object(py::str(b)) : py::object(py::none());
    }, "'gloo', 'nccl' or 'solo'; None before init() and while this rank has no communicator.");
    m.def("register_params", &register_params, py::arg("params"));
    m.def("state_add", &state_add, py::arg("length"));
    m.def("get_state_shard", &get_state_shard, py::arg("index"));
    m.def("set_state_shard", &set_state_shard, py::arg("index"), py::arg("values"));
    m.def("start", &start, "(step, rewind): the job's step counter, and whether to reload the last checkpoint.");
    m.def("boundary", &boundary, py::arg("step"));
    m.def("request_stop", [](const std::string &reason) { check(omni_request_stop(reason.c_str()), "request_stop()"); },
          py::arg("reason"));
    m.def("checkpoint_done",
          [](py::handle step, std::optional<std::string> location) {
              check(omni_checkpoint_done(to_u64(step, "step", 0, UINT64_MAX), location ? location->c_str() : nullptr),
                    "checkpoint_done()");
          },
          py::arg("step"), py::arg("location") = py::none());
    m.def("check_member", [] { check(omni_check_member(), "check_member()"); },
          "Raises CommError when this rank was declared lost (stopped past the boundary timeout) and "
          "is fenced out: it must exit without writing a checkpoint or metrics (omni_check_member).");
    m.def("sockets_begin", [] { check(omni_sockets_begin(), "sockets_begin()"); },
          "Before another library connects this generation's ranks (omni_sockets_begin).");
    m.def("sockets_adopt",
          [](py::handle expected) {
              std::uint32_t n = 0;
              check(omni_sockets_adopt(static_cast<std::uint32_t>(to_u64(expected, "expected", 0, UINT32_MAX)), &n),
                    "sockets_adopt()");
              return n;
          },
          py::arg("expected"),
          "After it: its new connections are shut down when a peer is declared lost; returns how many "
          "were adopted (0 unless exactly `expected` appeared; omni_sockets_adopt).");
    m.def("gloo_guarded_device",
          [](const std::string &iface, const std::string &hostname) -> py::object {
              // torch registers gloo::transport::Device (ProcessGroupGloo.Device) in pybind11's
              // internals; ours are the same only where both modules were built with the same
              // pybind11 ABI (and torch links the same libgloo: the type is libgloo's).
              if (!py::detail::get_type_info(typeid(gloo::transport::Device)))
                  throw py::type_error(
                      "gloo_guarded_device(): no Python type for gloo::transport::Device: import "
                      "torch.distributed first; if it is imported, torch's pybind11 internals are not "
                      "this module's (a torch built with another pybind11 or compiler ABI)");
              void *out = nullptr;
              check(omni_gloo_guarded_device(iface.c_str(), hostname.c_str(), &out), "gloo_guarded_device()");
              std::unique_ptr<std::shared_ptr<gloo::transport::Device>> held(
                  static_cast<std::shared_ptr<gloo::transport::Device> *>(out));
              return py::cast(*held);
          },
          py::arg("iface") = "", py::arg("hostname") = "",
          "A Gloo TCP device whose pairs only take a connection that first sends the pair's token, "
          "which travels in the pair's address through the group's store (omni_gloo_guarded_device), "
          "as torch's ProcessGroupGloo.Device.");
    m.def("set_cuda_stream", [](py::handle stream) {
        const std::uint64_t s = stream.is_none() ? 0 : to_u64(stream, "stream", 0, UINT64_MAX);
        check(omni_set_cuda_stream(reinterpret_cast<void *>(static_cast<std::uintptr_t>(s))), "set_cuda_stream()");
        g_stream = stream.is_none() ? -1 : static_cast<std::int64_t>(s);
    }, py::arg("stream"));

    py::class_<omni_decision>(m, "Decision", "What a boundary decided (omni_boundary).")
        .def_readonly("kind", &omni_decision::kind)
        .def_readonly("generation", &omni_decision::generation)
        .def_readonly("world", &omni_decision::world)
        .def_readonly("rank", &omni_decision::rank)
        .def_readonly("previous_world", &omni_decision::previous_world)
        .def_readonly("units_joined", &omni_decision::units_joined)
        .def_readonly("units_left", &omni_decision::units_left)
        .def_readonly("grad_accum", &omni_decision::grad_accum);
    m.attr("CONTINUE") = int(OMNI_CONTINUE);
    m.attr("RESHAPED") = int(OMNI_RESHAPED);
    m.attr("REWIND") = int(OMNI_REWIND);
    m.attr("STOP") = int(OMNI_STOP);
    m.attr("LEFT") = int(OMNI_LEFT);

    // Groups and collectives.
    m.attr("DP") = int(OMNI_GROUP_DP);
    m.attr("MP") = int(OMNI_GROUP_MP);
    m.attr("WORLD") = int(OMNI_GROUP_WORLD);
    m.def("sp", [](py::handle degree) { return OMNI_GROUP_SP(static_cast<int>(to_u64(degree, "degree", 1, 65535))); },
          py::arg("degree"), "The sequence-parallel group of this degree (OMNI_GROUP_SP).");
    m.def("group_info", [](py::handle group) {
        std::uint32_t r = 0, s = 0;
        check(omni_group_info(group_id(group), &r, &s), "group_info()");
        return py::make_tuple(r, s);
    }, py::arg("group") = int(OMNI_GROUP_DP), "(rank, size) of this rank in the group.");
    m.def("allreduce", &allreduce, py::arg("buffer"), py::arg("op") = "sum", py::arg("group") = int(OMNI_GROUP_DP),
          py::arg("dtype") = py::none());
    m.def("broadcast", &broadcast, py::arg("buffer"), py::arg("root") = 0, py::arg("group") = int(OMNI_GROUP_DP),
          py::arg("dtype") = py::none());
    m.def("allgather", &allgather, py::arg("send"), py::arg("recv"), py::arg("group") = int(OMNI_GROUP_DP),
          py::arg("dtype") = py::none());
    m.def("reduce_scatter", &reduce_scatter, py::arg("send"), py::arg("recv"), py::arg("op") = "sum",
          py::arg("group") = int(OMNI_GROUP_DP), py::arg("dtype") = py::none());
    m.def("barrier", &barrier, py::arg("group") = int(OMNI_GROUP_DP));

    // The program's store.
    m.def("store_set", &store_set, py::arg("generation"), py::arg("key"), py::arg("value"));
    m.def("store_get", &store_get, py::arg("generation"), py::arg("key"), py::arg("timeout_ms"));
    m.def("store_add", &store_add, py::arg("generation"), py::arg("key"), py::arg("amount"));
    m.def("store_wait", &store_wait, py::arg("generation"), py::arg("keys"), py::arg("timeout_ms"));

    // The runtime's ledger.
    m.def("data_configure",
          [](py::handle dataset_size, py::handle seed, py::handle global_batch, py::handle micro_batch) {
              check(omni_data_configure(to_u64(dataset_size, "dataset_size", 1, std::uint64_t(1) << 48),
                                        to_u64(seed, "seed", 0, UINT64_MAX),
                                        to_u64(global_batch, "global_batch", 0, std::uint64_t(1) << 40),
                                        to_u64(micro_batch, "micro_batch", 0, std::uint64_t(1) << 40)),
                    "data_configure()");
          },
          py::arg("dataset_size"), py::arg("seed"), py::arg("global_batch") = 0, py::arg("micro_batch") = 0);
    m.def("data_grad_accum", [] { std::uint32_t v = 0; check(omni_data_grad_accum(&v), "data_grad_accum()"); return v; });
    m.def("data_micro_batch", &data_micro_batch, py::arg("micro"));
    m.def("data_step_samples", &data_step_samples, "(indices, time) of this replica's work in the current step.");
    m.def("data_balance", &data_balance, py::arg("policy"), py::arg("cost") = py::none());
    m.def("data_save", &data_save);
    m.def("data_load", [](const std::string &text) { check(omni_data_load(text.data(), text.size()), "data_load()"); },
          py::arg("text"));

    py::class_<Ledger>(m, "Ledger", "The stand-alone sample ledger (omni_ledger_*).")
        .def(py::init(&ledger_new), py::arg("dataset_size"), py::arg("global_batch"), py::arg("micro_batch"),
             py::arg("seed"), py::arg("dp_size"))
        .def("grad_accum", [](const Ledger &l) {
            std::uint32_t v = 0;
            check(omni_ledger_grad_accum(l.get(), &v), "Ledger.grad_accum()");
            return v;
        })
        .def("position", [](const Ledger &l) {
            std::uint64_t s = 0, e = 0, c = 0;
            check(omni_ledger_position(l.get(), &s, &e, &c), "Ledger.position()");
            return py::make_tuple(s, e, c);
        }, "(step, epoch, consumed_in_epoch)")
        .def("micro_batch", [](const Ledger &l, py::handle rank, py::handle micro) {
            const auto r = static_cast<std::uint32_t>(to_u64(rank, "rank", 0, UINT32_MAX));
            const auto mi = static_cast<std::uint32_t>(to_u64(micro, "micro", 0, UINT32_MAX));
            std::size_t count = 0;
            int rc = omni_ledger_micro_batch(l.get(), r, mi, nullptr, 0, &count);
            if (rc != OMNI_ERANGE) check(rc, "Ledger.micro_batch()");
            std::vector<std::uint64_t> idx(count);
            check(omni_ledger_micro_batch(l.h, r, mi, idx.data(), idx.size(), &count), "Ledger.micro_batch()");
            return indices_array(idx);
        }, py::arg("rank"), py::arg("micro"))
        .def("commit_step", [](Ledger &l) { check(omni_ledger_commit_step(l.get()), "Ledger.commit_step()"); })
        .def("resize", [](Ledger &l, py::handle dp) {
            check(omni_ledger_resize(l.get(), static_cast<std::uint32_t>(to_u64(dp, "dp_size", 1, std::uint64_t(1) << 20))),
                  "Ledger.resize()");
        }, py::arg("dp_size"))
        .def("save", [](const Ledger &l) {
            std::size_t len = 0;
            int rc = omni_ledger_save(l.get(), nullptr, 0, &len);
            if (rc != OMNI_ERANGE && rc != OMNI_OK) check(rc, "Ledger.save()");
            std::string out(len, '\0');
            check(omni_ledger_save(l.h, out.data(), out.size(), &len), "Ledger.save()");
            out.resize(len ? len - 1 : 0);
            return out;
        })
        .def_static("load", [](const std::string &text) {
            auto l = std::make_unique<Ledger>();
            check(omni_ledger_load(text.data(), text.size(), &l->h), "Ledger.load()");
            return l;
        }, py::arg("text"));

    // Synthetic workloads.
    py::class_<Workload>(m, "Workload", "A synthetic multimodal workload (omni-workload(5)): a preset or a file.")
        .def(py::init(&workload_load), py::arg("path_or_preset"))
        .def_static("presets", &omni::workload::Workload::presets)
        .def("modalities", &workload_modalities)
        .def("sample", &workload_sample, py::arg("seed"), py::arg("index"), py::arg("step"),
             "(modality index, length in its unit) of sample `index` as step `step` consumes it.")
        .def("cost", &workload_cost, py::arg("seed"), py::arg("index"), py::arg("step"), py::arg("kind") = "tokens")
        .def("to_json", [](const Workload &w) { return w.w.to_json(); });

    // Checkpoints.
    py::class_<Writer>(m, "CheckpointWriter", "One rank's shard of a checkpoint (omni_ckpt_writer_*).")
        .def(py::init(&writer_open), py::arg("root"), py::arg("step"), py::arg("rank"), py::arg("attempt") = py::none(),
             py::arg("base") = py::none())
        .def("add_tensor", &writer_add_tensor, py::arg("name"), py::arg("data"), py::arg("shape") = py::none(),
             py::arg("offset") = py::none(), py::arg("change") = "detect", py::arg("dtype") = py::none())
        .def("add_rank_state", &writer_add_rank_state, py::arg("rank"), py::arg("rng"), py::arg("consumed") = py::none())
        .def("finish", &writer_finish)
        .def("close", [](Writer &w) {
            omni_ckpt_writer_free(w.h);
            w.h = nullptr;
        });
    m.def("commit", &commit, py::arg("root"), py::arg("writers"), py::arg("attempt") = py::none(),
          py::arg("meta") = py::dict());
    m.def("abandon", &abandon, py::arg("root"), py::arg("step"), py::arg("attempt") = py::none(),
          "Removes the files of checkpoint `step` written as `attempt`, which will not be committed.");
    py::class_<Reader>(m, "CheckpointReader", "A committed checkpoint (omni_ckpt_reader_*).")
        .def(py::init(&reader_open), py::arg("path"), py::arg("latest") = false, py::arg("verify") = true)
        .def("meta", &reader_meta)
        .def("tensors", &reader_tensors)
        .def("read", &reader_read, py::arg("name"), py::arg("offset") = py::none(), py::arg("count") = py::none())
        .def("rank_state", &reader_rank_state, py::arg("rank"))
        .def("close", [](Reader &r) {
            omni_ckpt_reader_close(r.h);
            r.h = nullptr;
        });
}

// The C API (include/omni/ckpt.h) over the C++ API. Every entry point catches everything:
// an exception (std::bad_alloc, a misuse of std::get) must never unwind into C code.
#include "omni/ckpt.h"

#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "common/c_status.h"
#include "format.h"
#include "omni/ckpt_cpp.h"
#include "writer_internal.h"

using namespace omni::ckpt;

struct omni_ckpt_writer {
    std::unique_ptr<ShardWriter> w;
};
struct omni_ckpt_async {
    AsyncShardWriter a;
    std::string fallback;   // what omni_ckpt_async_get_stats hands out
    bool track_writes = false;
};
struct omni_ckpt_reader {
    std::unique_ptr<Reader> r;
};

namespace {

thread_local std::string g_err;

// Every failure goes through here: the status code and this thread's message.
int fail(omni_status code, std::string msg) { return omni::capi::record(g_err, code, std::move(msg)); }
// An argument the caller got wrong.
int invalid(const std::string &msg) { return fail(OMNI_EINVAL, msg); }
// The attempt name is the caller's argument: refused here as one, before any file is touched.
int check_attempt_arg(const char *attempt) {
    if (!attempt) return OMNI_OK;
    auto st = omni::ckpt::check_attempt(attempt);
    return st ? OMNI_OK : invalid(st.error());
}
// A failure of the C++ API: the checkpoint's files or their content (its message says which).
int check(const omni::Status &st) { return st ? OMNI_OK : fail(OMNI_EIO, st.error()); }

// Every entry point's body runs here: no exception may unwind into C code.
template <typename F>
int guard(const char *fn, F &&f) noexcept {
    return omni::capi::guard(g_err, fn, std::forward<F>(f));
}

bool dtype_from_c(omni_ckpt_dtype d, DType *out) {
    switch (d) {
    case OMNI_CKPT_FP32: *out = DType::fp32; return true;
    case OMNI_CKPT_BF16: *out = DType::bf16; return true;
    case OMNI_CKPT_FP16: *out = DType::fp16; return true;
    case OMNI_CKPT_INT64: *out = DType::int64; return true;
    case OMNI_CKPT_UINT8: *out = DType::uint8; return true;
    case OMNI_CKPT_DTYPE_FORCE_INT: break;   // not a dtype
    }
    return false;
}

bool change_from_c(omni_ckpt_change c, Change *out) {
    switch (c) {
    case OMNI_CKPT_DETECT: *out = Change::detect; return true;
    case OMNI_CKPT_CHANGED: *out = Change::changed; return true;
    case OMNI_CKPT_UNCHANGED: *out = Change::unchanged; return true;
    case OMNI_CKPT_CHANGE_FORCE_INT: break;   // not a mode
    }
    return false;
}

// Validates and converts the common arguments of the two add_tensor entry points.
int tensor_args(const char *name, omni_ckpt_dtype dtype, uint32_t ndim, const uint64_t *shape,
                const uint64_t *offset, const uint64_t *count, omni_ckpt_change change,
                DType *dt, Change *ch, Shape *s, Shape *o, Shape *c) {
    if (!name) return invalid("add_tensor: name is NULL");
    if (!dtype_from_c(dtype, dt))
        return invalid(std::string("tensor ") + name + ": dtype " + std::to_string(int(dtype)) +
                    " is not an omni_ckpt_dtype");
    if (!change_from_c(change, ch))
        return invalid(std::string("tensor ") + name + ": change " + std::to_string(int(change)) +
                    " is not an omni_ckpt_change");
    if (ndim < 1 || ndim > kMaxRank || !shape || !offset || !count)
        return invalid(std::string("tensor ") + name + ": ndim " + std::to_string(ndim) +
                    " with shape/offset/count arrays; expected 1..8 and non-NULL arrays");
    s->assign(shape, shape + ndim);
    o->assign(offset, offset + ndim);
    c->assign(count, count + ndim);
    return 0;
}

RankState rank_state_from_c(uint32_t rank, const void *rng, size_t rng_bytes,
                            const int64_t *consumed, size_t n) {
    RankState s;
    s.rank = rank;
    if (rng && rng_bytes) s.rng.assign(static_cast<const uint8_t *>(rng), static_cast<const uint8_t *>(rng) + rng_bytes);
    if (consumed && n) s.consumed.assign(consumed, consumed + n);
    return s;
}

}  // namespace

extern "C" {

const char *omni_ckpt_last_error(void) { return g_err.c_str(); }

int omni_ckpt_writer_open(const char *root, uint64_t step, uint32_t rank, const char *attempt,
                          const char *base, omni_ckpt_writer **out) {
    return guard("omni_ckpt_writer_open", [&] {
        if (!root || !out) return invalid("omni_ckpt_writer_open: root and out must not be NULL");
        if (int rc = check_attempt_arg(attempt)) return rc;
        WriterOptions o;
        if (attempt) o.attempt = attempt;
        if (base) o.base = base;
        auto w = ShardWriter::open(root, step, rank, o);
        if (!w) return fail(OMNI_EIO, w.error());
        *out = new omni_ckpt_writer{std::move(w.value())};
        return 0;
    });
}

int omni_ckpt_writer_add_tensor(omni_ckpt_writer *w, const char *name, omni_ckpt_dtype dtype,
                                uint32_t ndim, const uint64_t *shape, const uint64_t *offset,
                                const uint64_t *count, const void *data,
                                omni_ckpt_change change) {
    return guard("omni_ckpt_writer_add_tensor", [&] {
        if (!w) return invalid("omni_ckpt_writer_add_tensor: writer is NULL");
        DType dt;
        Change ch;
        Shape s, o, c;
        if (int rc = tensor_args(name, dtype, ndim, shape, offset, count, change, &dt, &ch, &s, &o, &c)) return rc;
        return check(w->w->add_tensor(name, dt, s, o, c, data, ch));
    });
}

int omni_ckpt_writer_track_writes(omni_ckpt_writer *w, int on) {
    return guard("omni_ckpt_writer_track_writes", [&] {
        if (!w) return invalid("omni_ckpt_writer_track_writes: writer is NULL");
        set_track_writes(*w->w, on != 0);
        return 0;
    });
}

const char *omni_ckpt_write_tracking_status(void) {
    static thread_local std::string why;
    try {
        why = write_tracking_status();
    } catch (...) {
        why = "out of memory";
    }
    return why.empty() ? nullptr : why.c_str();
}

int omni_ckpt_writer_add_rank_state(omni_ckpt_writer *w, uint32_t rank, const void *rng,
                                    size_t rng_bytes, const int64_t *consumed, size_t n_consumed) {
    return guard("omni_ckpt_writer_add_rank_state", [&] {
        if (!w) return invalid("omni_ckpt_writer_add_rank_state: writer is NULL");
        if ((!rng && rng_bytes) || (!consumed && n_consumed))
            return invalid("omni_ckpt_writer_add_rank_state: NULL array with a non-zero length");
        return check(w->w->add_rank_state(rank_state_from_c(rank, rng, rng_bytes, consumed, n_consumed)));
    });
}

int omni_ckpt_writer_finish(omni_ckpt_writer *w) {
    return guard("omni_ckpt_writer_finish", [&] {
        if (!w) return invalid("omni_ckpt_writer_finish: writer is NULL");
        return check(w->w->finish());
    });
}

void omni_ckpt_writer_free(omni_ckpt_writer *w) {
    try {
        delete w;
    } catch (...) {
    }
}

int omni_ckpt_abandon(const char *root, uint64_t step, const char *attempt) {
    return guard("omni_ckpt_abandon", [&] {
        if (!root) return invalid("omni_ckpt_abandon: root must not be NULL");
        if (int rc = check_attempt_arg(attempt)) return rc;
        return check(abandon(root, step, attempt ? attempt : "0"));
    });
}

int omni_ckpt_commit(const char *root, uint32_t writers, const char *attempt,
                     const omni_ckpt_meta *meta, char *path_out, size_t path_len) {
    return guard("omni_ckpt_commit", [&] {
        if (!root || !meta) return invalid("omni_ckpt_commit: root and meta must not be NULL");
        if (int rc = check_attempt_arg(attempt)) return rc;
        Meta m;
        m.step = meta->step;
        m.generation = meta->generation;
        m.world_size = meta->world_size;
        if (meta->unit_layout) m.unit_layout = meta->unit_layout;
        if (meta->lr_kind) m.lr.kind = meta->lr_kind;
        m.lr.base_lr = meta->lr_base;
        m.lr.warmup_steps = meta->lr_warmup_steps;
        m.lr.total_steps = meta->lr_total_steps;
        m.lr.last_step = meta->lr_last_step;
        m.ledger.epoch = meta->epoch;
        m.ledger.seed = meta->seed;
        CommitOptions o;
        if (attempt) o.attempt = attempt;
        auto r = commit(root, writers, m, o);
        if (!r) return fail(OMNI_EIO, r.error());
        if (path_out && path_len > r.value().size())
            std::memcpy(path_out, r.value().c_str(), r.value().size() + 1);
        return 0;
    });
}

int omni_ckpt_async_create(omni_ckpt_async **out) {
    return guard("omni_ckpt_async_create", [&] {
        if (!out) return invalid("omni_ckpt_async_create: out is NULL");
        *out = new omni_ckpt_async;
        return 0;
    });
}

int omni_ckpt_async_set_snapshot(omni_ckpt_async *a, omni_ckpt_snapshot mode) {
    return guard("omni_ckpt_async_set_snapshot", [&] {
        if (!a) return invalid("omni_ckpt_async_set_snapshot: handle is NULL");
        switch (mode) {
        case OMNI_CKPT_SNAPSHOT_COPY: a->a.set_snapshot(Snapshot::copy); return 0;
        case OMNI_CKPT_SNAPSHOT_COPY_ON_WRITE: a->a.set_snapshot(Snapshot::copy_on_write); return 0;
        case OMNI_CKPT_SNAPSHOT_FORCE_INT: break;   // not a mode
        }
        return invalid("omni_ckpt_async_set_snapshot: mode " + std::to_string(int(mode)) +
                    " is not an omni_ckpt_snapshot");
    });
}

int omni_ckpt_async_get_stats(omni_ckpt_async *a, omni_ckpt_async_stats *out) {
    return guard("omni_ckpt_async_get_stats", [&] {
        if (!a || !out) return invalid("omni_ckpt_async_get_stats: handle and out must not be NULL");
        const AsyncStats s = a->a.stats();
        a->fallback = s.fallback;
        out->slices_copied = s.slices_copied;
        out->slices_protected = s.slices_protected;
        out->bytes_copied = s.bytes_copied;
        out->bytes_protected = s.bytes_protected;
        out->faults = s.faults;
        out->bytes_faulted = s.bytes_faulted;
        out->kernel_writes_fail = s.kernel_writes_fail ? 1 : 0;
        out->fallback = a->fallback.c_str();
        out->slices_referenced = s.slices_referenced;
        out->bytes_referenced = s.bytes_referenced;
        out->bytes_drained = s.bytes_drained;
        return 0;
    });
}

int omni_ckpt_async_track_writes(omni_ckpt_async *a, int on) {
    return guard("omni_ckpt_async_track_writes", [&] {
        if (!a) return invalid("omni_ckpt_async_track_writes: handle is NULL");
        a->track_writes = on != 0;
        return 0;
    });
}

int omni_ckpt_async_begin(omni_ckpt_async *a, const char *root, uint64_t step, uint32_t rank,
                          const char *attempt, const char *base) {
    return guard("omni_ckpt_async_begin", [&] {
        if (!a || !root) return invalid("omni_ckpt_async_begin: handle and root must not be NULL");
        if (int rc = check_attempt_arg(attempt)) return rc;
        WriterOptions o;
        if (attempt) o.attempt = attempt;
        if (base) o.base = base;
        o.track_writes = a->track_writes;
        return check(a->a.begin(root, step, rank, o));
    });
}

int omni_ckpt_async_add_tensor(omni_ckpt_async *a, const char *name, omni_ckpt_dtype dtype,
                               uint32_t ndim, const uint64_t *shape, const uint64_t *offset,
                               const uint64_t *count, const void *data, omni_ckpt_change change) {
    return guard("omni_ckpt_async_add_tensor", [&] {
        if (!a) return invalid("omni_ckpt_async_add_tensor: handle is NULL");
        DType dt;
        Change ch;
        Shape s, o, c;
        if (int rc = tensor_args(name, dtype, ndim, shape, offset, count, change, &dt, &ch, &s, &o, &c)) return rc;
        return check(a->a.add_tensor(name, dt, s, o, c, data, ch));
    });
}

int omni_ckpt_async_add_rank_state(omni_ckpt_async *a, uint32_t rank, const void *rng,
                                   size_t rng_bytes, const int64_t *consumed, size_t n_consumed) {
    return guard("omni_ckpt_async_add_rank_state", [&] {
        if (!a) return invalid("omni_ckpt_async_add_rank_state: handle is NULL");
        if ((!rng && rng_bytes) || (!consumed && n_consumed))
            return invalid("omni_ckpt_async_add_rank_state: NULL array with a non-zero length");
        return check(a->a.add_rank_state(rank_state_from_c(rank, rng, rng_bytes, consumed, n_consumed)));
    });
}

int omni_ckpt_async_submit(omni_ckpt_async *a) {
    return guard("omni_ckpt_async_submit", [&] {
        if (!a) return invalid("omni_ckpt_async_submit: handle is NULL");
        return check(a->a.submit());
    });
}

int omni_ckpt_async_wait(omni_ckpt_async *a) {
    return guard("omni_ckpt_async_wait", [&] {
        if (!a) return invalid("omni_ckpt_async_wait: handle is NULL");
        return check(a->a.wait());
    });
}

void omni_ckpt_async_free(omni_ckpt_async *a) {
    try {
        delete a;
    } catch (...) {
    }
}

int omni_ckpt_reader_open(const char *path, int root_latest, int verify, omni_ckpt_reader **out) {
    return guard("omni_ckpt_reader_open", [&] {
        if (!path || !out) return invalid("omni_ckpt_reader_open: path and out must not be NULL");
        ReadOptions o;
        o.verify_checksums = verify != 0;
        auto r = root_latest ? Reader::open_latest(path, o) : Reader::open(path, o);
        if (!r) return fail(OMNI_EIO, r.error());
        *out = new omni_ckpt_reader{std::move(r.value())};
        return 0;
    });
}

int omni_ckpt_reader_meta(omni_ckpt_reader *r, omni_ckpt_meta *meta) {
    return guard("omni_ckpt_reader_meta", [&] {
        if (!r || !meta) return invalid("omni_ckpt_reader_meta: reader and meta must not be NULL");
        const Meta &m = r->r->manifest().meta;
        meta->step = m.step;
        meta->generation = m.generation;
        meta->world_size = m.world_size;
        meta->unit_layout = m.unit_layout.c_str();
        meta->lr_kind = m.lr.kind.c_str();
        meta->lr_base = m.lr.base_lr;
        meta->lr_warmup_steps = m.lr.warmup_steps;
        meta->lr_total_steps = m.lr.total_steps;
        meta->lr_last_step = m.lr.last_step;
        meta->epoch = m.ledger.epoch;
        meta->seed = m.ledger.seed;
        return 0;
    });
}

size_t omni_ckpt_reader_tensor_count(omni_ckpt_reader *r) {
    return r ? r->r->manifest().tensors.size() : 0;
}

int omni_ckpt_reader_tensor_info(omni_ckpt_reader *r, size_t i, const char **name,
                                 omni_ckpt_dtype *dtype, uint32_t *ndim, uint64_t *shape) {
    return guard("omni_ckpt_reader_tensor_info", [&] {
        if (!r) return invalid("omni_ckpt_reader_tensor_info: reader is NULL");
        const auto &ts = r->r->manifest().tensors;
        if (i >= ts.size())
            return invalid("omni_ckpt_reader_tensor_info: index " + std::to_string(i) + " >= " +
                        std::to_string(ts.size()) + " tensors");
        const TensorInfo &t = ts[i];
        if (name) *name = t.name.c_str();
        if (dtype) *dtype = static_cast<omni_ckpt_dtype>(static_cast<int>(t.dtype));
        if (ndim) *ndim = static_cast<uint32_t>(t.shape.size());
        if (shape) std::copy(t.shape.begin(), t.shape.end(), shape);
        return 0;
    });
}

int omni_ckpt_reader_read(omni_ckpt_reader *r, const char *name, uint32_t ndim,
                          const uint64_t *offset, const uint64_t *count, void *dst, size_t dst_bytes) {
    return guard("omni_ckpt_reader_read", [&] {
        if (!r || !name || !offset || !count || !dst)
            return invalid("omni_ckpt_reader_read: NULL argument");
        if (ndim < 1 || ndim > kMaxRank)
            return invalid(std::string("tensor ") + name + ": ndim " + std::to_string(ndim) + ": expected 1..8");
        const TensorInfo *t = r->r->find(name);
        if (!t) return fail(OMNI_ENOENT, std::string("tensor ") + name + ": not in the checkpoint");
        // A buffer too small is the caller's to grow (OMNI_ERANGE), not a checkpoint failure;
        // a count that overflows is left to read(), which refuses it.
        std::uint64_t need = dtype_size(t->dtype);
        for (uint32_t i = 0; i < ndim; ++i)
            if (__builtin_mul_overflow(need, count[i], &need)) need = 0;
        if (need && dst_bytes < need)
            return fail(OMNI_ERANGE, std::string("tensor ") + name + ": the slice needs " +
                                         std::to_string(need) + " bytes, the buffer holds " +
                                         std::to_string(dst_bytes));
        return check(r->r->read(name, Shape(offset, offset + ndim), Shape(count, count + ndim), dst, dst_bytes));
    });
}

int omni_ckpt_reader_rank_state(omni_ckpt_reader *r, uint32_t rank, void *rng, size_t *rng_bytes,
                                int64_t *consumed, size_t *n_consumed) {
    return guard("omni_ckpt_reader_rank_state", [&] {
        if (!r || !rng_bytes || !n_consumed)
            return invalid("omni_ckpt_reader_rank_state: reader and size pointers must not be NULL");
        auto s = r->r->rank_state(rank);
        if (!s) return fail(OMNI_EIO, s.error());
        const auto &st = s.value();
        if ((rng && *rng_bytes < st.rng.size()) || (consumed && *n_consumed < st.consumed.size()))
            return fail(OMNI_ERANGE, "rank state of rank " + std::to_string(rank) + ": buffers too small (" +
                        std::to_string(st.rng.size()) + " rng bytes, " +
                        std::to_string(st.consumed.size()) + " indices needed)");
        if (rng) std::memcpy(rng, st.rng.data(), st.rng.size());
        if (consumed) std::copy(st.consumed.begin(), st.consumed.end(), consumed);
        *rng_bytes = st.rng.size();
        *n_consumed = st.consumed.size();
        return 0;
    });
}

void omni_ckpt_reader_close(omni_ckpt_reader *r) {
    try {
        delete r;
    } catch (...) {
    }
}

}  // extern "C"

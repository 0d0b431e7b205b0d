// libomni's C API (include/omni/omni.h) over the C++ runtime. Every entry point catches
// everything: no exception may cross into a C trainer.
#include "omni/omni.h"

#include <cstring>
#include <new>
#include <string>

#include "ledger.h"

struct omni_ledger {
    omni::launcher::Ledger ledger;
};

namespace {

thread_local std::string last_error;

int fail(int code, std::string msg) {
    try {
        last_error = std::move(msg);
    } catch (...) {
        // Keep the previous message; the code still tells what happened.
    }
    return code;
}

template <typename F>
int guarded(F &&f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        return fail(OMNI_ENOMEM, "out of memory");
    } catch (const std::exception &e) {
        return fail(OMNI_EINTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
        return fail(OMNI_EINTERNAL, "internal error");
    }
}

}  // namespace

extern "C" {

const char *omni_last_error(void) { return last_error.c_str(); }

int omni_ledger_create(uint64_t dataset_size, uint64_t global_batch, uint64_t micro_batch,
                       uint64_t seed, uint32_t dp_size, omni_ledger **out) {
    return guarded([&] {
        if (!out) return fail(OMNI_EINVAL, "omni_ledger_create: out is NULL");
        *out = nullptr;
        omni::launcher::LedgerConfig cfg{dataset_size, global_batch, micro_batch, seed};
        auto l = omni::launcher::Ledger::create(cfg, dp_size);
        if (!l) return fail(OMNI_EINVAL, l.error());
        *out = new omni_ledger{std::move(l).value()};
        return int(OMNI_OK);
    });
}

void omni_ledger_destroy(omni_ledger *ledger) { delete ledger; }

int omni_ledger_grad_accum(const omni_ledger *ledger, uint32_t *grad_accum) {
    if (!ledger || !grad_accum) return fail(OMNI_EINVAL, "omni_ledger_grad_accum: NULL argument");
    *grad_accum = ledger->ledger.grad_accum();
    return OMNI_OK;
}

int omni_ledger_position(const omni_ledger *ledger, uint64_t *step, uint64_t *epoch,
                         uint64_t *consumed_in_epoch) {
    if (!ledger) return fail(OMNI_EINVAL, "omni_ledger_position: ledger is NULL");
    if (step) *step = ledger->ledger.step();
    if (epoch) *epoch = ledger->ledger.epoch();
    if (consumed_in_epoch) *consumed_in_epoch = ledger->ledger.consumed_in_epoch();
    return OMNI_OK;
}

int omni_ledger_micro_batch(const omni_ledger *ledger, uint32_t rank, uint32_t micro,
                            uint64_t *indices, size_t capacity, size_t *count) {
    return guarded([&] {
        if (!ledger || !count) return fail(OMNI_EINVAL, "omni_ledger_micro_batch: NULL argument");
        const uint64_t b = ledger->ledger.config().micro_batch;
        *count = static_cast<size_t>(b);
        if (capacity < b)
            return fail(OMNI_ERANGE, "omni_ledger_micro_batch: capacity " +
                                         std::to_string(capacity) + " is below the micro-batch " +
                                         std::to_string(b));
        if (!indices) return fail(OMNI_EINVAL, "omni_ledger_micro_batch: indices is NULL");
        auto v = ledger->ledger.micro_batch(rank, micro);
        if (!v) return fail(OMNI_EINVAL, v.error());
        std::memcpy(indices, v.value().data(), v.value().size() * sizeof(uint64_t));
        return int(OMNI_OK);
    });
}

int omni_ledger_commit_step(omni_ledger *ledger) {
    return guarded([&] {
        if (!ledger) return fail(OMNI_EINVAL, "omni_ledger_commit_step: ledger is NULL");
        auto st = ledger->ledger.commit_step();
        return st ? int(OMNI_OK) : fail(OMNI_EINVAL, st.error());
    });
}

int omni_ledger_resize(omni_ledger *ledger, uint32_t dp_size) {
    return guarded([&] {
        if (!ledger) return fail(OMNI_EINVAL, "omni_ledger_resize: ledger is NULL");
        auto st = ledger->ledger.resize(dp_size);
        return st ? int(OMNI_OK) : fail(OMNI_EINVAL, st.error());
    });
}

int omni_ledger_save(const omni_ledger *ledger, char *buffer, size_t capacity, size_t *length) {
    return guarded([&] {
        if (!ledger || !length) return fail(OMNI_EINVAL, "omni_ledger_save: NULL argument");
        std::string text = ledger->ledger.serialise();
        *length = text.size() + 1;
        if (capacity < text.size() + 1)
            return fail(OMNI_ERANGE, "omni_ledger_save: " + std::to_string(text.size() + 1) +
                                         " bytes needed");
        if (!buffer) return fail(OMNI_EINVAL, "omni_ledger_save: buffer is NULL");
        std::memcpy(buffer, text.c_str(), text.size() + 1);
        return int(OMNI_OK);
    });
}

int omni_ledger_load(const char *text, size_t length, omni_ledger **out) {
    return guarded([&] {
        if (!text || !out) return fail(OMNI_EINVAL, "omni_ledger_load: NULL argument");
        *out = nullptr;
        auto l = omni::launcher::Ledger::load(std::string_view(text, length));
        if (!l) return fail(OMNI_EFORMAT, l.error());
        *out = new omni_ledger{std::move(l).value()};
        return int(OMNI_OK);
    });
}

}  // extern "C"

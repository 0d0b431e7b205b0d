// libomni's C API (include/omni/omni.h) over the C++ runtime. Every entry point catches
// everything: no exception may cross into a C trainer.
#include "omni/omni.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "comm/gloo_guard.h"
#include "common/c_status.h"
#include "coord/client.h"
#include "coord/wire.h"
#include "runtime/ledger.h"
#include "runtime/runtime.h"
#include "runtime/solo.h"

struct omni_ledger {
    omni::launcher::Ledger ledger;
};

namespace {

thread_local std::string last_error;

int fail(int code, std::string msg) {
    return omni::capi::record(last_error, static_cast<omni_status>(code), std::move(msg));
}

// Every entry point's body runs here: no exception may unwind into C code.
template <typename F>
int guarded(F &&f) noexcept {
    return omni::capi::guard(last_error, nullptr, std::forward<F>(f));
}

namespace rt {

using omni::launcher::Runtime;

// The process's runtime and the optimizer shards the C API owns for it (a deque: the runtime
// keeps pointers to the vectors, so they must not move).
struct Process {
    std::unique_ptr<Runtime> runtime;
    std::deque<std::vector<float>> shards;
};
Process *process = nullptr;
bool sockets_begun = false;  // omni_sockets_begin without its omni_sockets_adopt yet

Runtime *get(const char *fn) {
    if (!process || !process->runtime) {
        fail(OMNI_ESTATE, std::string(fn) + ": omni_init has not been called");
        return nullptr;
    }
    return process->runtime.get();
}

// The communicator of r, or null with OMNI_ESTATE set: a joiner named by an announced grow
// has none until omni_start admits it.
// The communicator of `group` (OMNI_GROUP_*) into *out: OMNI_OK, or the error (an unknown
// group, a rank without communicators) with its message set.
// OMNI_GROUP_SP(k)'s degree k, or 0 for another group.
std::uint32_t sp_degree(int group) {
    return (group & ~0xffff) == 0x10000 ? static_cast<std::uint32_t>(group & 0xffff) : 0;
}

std::string unknown_group(const char *fn, int group) {
    return std::string(fn) + ": unknown group " + std::to_string(group) +
           " (expected OMNI_GROUP_DP, OMNI_GROUP_MP, OMNI_GROUP_WORLD or OMNI_GROUP_SP(k))";
}

int comm_of(Runtime *r, int group, const char *fn, omni::launcher::Communicator **out) {
    const std::uint32_t k = sp_degree(group);
    if (group != OMNI_GROUP_DP && group != OMNI_GROUP_MP && group != OMNI_GROUP_WORLD && !k)
        return fail(OMNI_EINVAL, unknown_group(fn, group));
    if (k && ((k & (k - 1)) || r->dp_size() % k))
        return fail(OMNI_EINVAL, std::string(fn) + ": OMNI_GROUP_SP(" + std::to_string(k) +
                                     "): expected a power of two that divides the DP size " +
                                     std::to_string(r->dp_size()));
    if (r->has_comm() && k) {
        auto c = r->sp_comm(k);  // the degree is valid: what fails is the rendezvous
        if (!c) return fail(OMNI_ECOMM, std::string(fn) + ": " + c.error());
        *out = c.value();
        return OMNI_OK;
    }
    if (r->has_comm()) {
        *out = group == OMNI_GROUP_DP ? &r->comm() : group == OMNI_GROUP_MP ? &r->mp_comm() : &r->world_comm();
        return OMNI_OK;
    }
    if (r->collectives_abandoned())
        return fail(OMNI_ECOMM, std::string(fn) + ": a collective of generation " + std::to_string(r->generation()) +
                                    " failed on this rank; omni_boundary says what the job does now (OMNI_REWIND "
                                    "after a lost rank)");
    return fail(OMNI_ESTATE, std::string(fn) +
                                 (r->started() ? ": this rank left the job at a planned shrink (OMNI_LEFT) "
                                                 "and has no communicator"
                                               : ": this rank joins at an announced change and has no "
                                                 "communicator before omni_start"));
}

bool dtype_of(int t, omni::launcher::DType &out) {
    if (t == OMNI_FP32) out = omni::launcher::DType::fp32;
    else if (t == OMNI_BF16) out = omni::launcher::DType::bf16;
    else if (t == OMNI_INT64) out = omni::launcher::DType::i64;
    else return false;
    return true;
}

bool op_of(int o, omni::launcher::ReduceOp &out) {
    if (o == OMNI_SUM) out = omni::launcher::ReduceOp::sum;
    else if (o == OMNI_AVG) out = omni::launcher::ReduceOp::avg;
    else return false;
    return true;
}

// start() and boundary() say whose fault a failure was.
int fault_code(const Runtime &r) {
    return r.last_fault() == omni::launcher::Fault::usage ? OMNI_EINVAL : OMNI_ECOMM;
}

int comm_result(Runtime *r, const omni::Status &st) {
    if (st) return OMNI_OK;
    // With NCCL the DP collectives are NCCL's, which the rewind aborts; only Gloo is closed.
    if (!r->nccl_backend()) r->abandon_collectives();
    return fail(OMNI_ECOMM, st.error());
}

}  // namespace rt

// The program's own key/value store (omni_store_*): a coordinator connection of its own, so
// that any thread may use it (a torch.distributed process group calls its store from the
// thread that builds it, and in later releases from its watchdog), one call at a time.
namespace store {

std::mutex mu;
std::string endpoint, secret;  // empty: no coordinator (not initialised, or standalone)
std::unique_ptr<omni::launcher::CoordinatorClient> client;

// Under mu: the connection, or null with the error set.
omni::launcher::CoordinatorClient *get(const char *fn) {
    if (endpoint.empty()) {
        fail(OMNI_ESTATE, std::string(fn) +
                              ": no coordinator (omni_init has not been called, or the rank runs standalone; "
                              "a standalone program needs no shared store)");
        return nullptr;
    }
    if (!client) {
        auto c = omni::launcher::CoordinatorClient::connect(endpoint, secret);
        if (!c) {
            fail(OMNI_ECOMM, std::string(fn) + ": " + c.error());
            return nullptr;
        }
        client = std::move(c).value();
    }
    return client.get();
}

// "user/KEY", checked: the program's keys never meet libomni's own (Gloo's rendezvous).
bool key_of(const char *fn, const char *key, std::string &out) {
    if (!key) return fail(OMNI_EINVAL, std::string(fn) + ": key is NULL"), false;
    out = std::string("user/") + key;
    if (auto st = omni::launcher::check_kv_key(out); !st)
        return fail(OMNI_EINVAL, std::string(fn) + ": key '" + std::string(key).substr(0, 64) + "': " + st.error() +
                                     " (at most " + std::to_string(omni::launcher::kMaxKeyLength - 5) + ")"),
               false;
    return true;
}

constexpr std::int64_t kCallMs = 30000;  // a set or add the coordinator does not answer

int timeout_of(const char *fn, std::int64_t timeout_ms) {
    if (timeout_ms < 0 || timeout_ms > omni::launcher::kMaxWaitMs)
        return fail(OMNI_EINVAL, std::string(fn) + ": timeout_ms " + std::to_string(timeout_ms) + " is outside 0.." +
                                     std::to_string(omni::launcher::kMaxWaitMs));
    return OMNI_OK;
}

}  // namespace store

}  // namespace

extern "C" {

const char *omni_last_error(void) { return last_error.c_str(); }

int omni_init(void) {
    return guarded([&] {
        using namespace omni::launcher;
        if (rt::process) return fail(OMNI_ESTATE, "omni_init: already initialised");
        auto pmix = PmixSession::open();
        if (!pmix) return fail(OMNI_ECOMM, "omni_init: " + pmix.error());
        auto opts = runtime_options_from_env([](const char *n) { return std::getenv(n); },
                                             pmix.value()->identity());
        if (!opts) return fail(OMNI_EINVAL, "omni_init: " + opts.error());
        auto r = Runtime::create(opts.value());
        if (!r) return fail(OMNI_ECOMM, "omni_init: " + r.error());
        r.value()->keep_pmix(std::move(pmix).value());
        auto p = std::make_unique<rt::Process>();
        p->runtime = std::move(r).value();
        if (!opts.value().standalone) {
            std::lock_guard<std::mutex> lock(store::mu);
            store::endpoint = opts.value().endpoint;
            store::secret = opts.value().secret;
        }
        rt::process = p.release();
        return int(OMNI_OK);
    });
}

int omni_finalize(void) {
    return guarded([&] {
        {
            std::lock_guard<std::mutex> lock(store::mu);
            store::client.reset();
            store::endpoint.clear();
            store::secret.clear();
        }
        delete rt::process;
        rt::process = nullptr;
        return int(OMNI_OK);
    });
}

int omni_rank(uint32_t *rank) {
    return guarded([&] {
        auto *r = rt::get("omni_rank");
        if (!r) return int(OMNI_ESTATE);
        if (rank) *rank = r->rank();
        return int(OMNI_OK);
    });
}

int omni_world_size(uint32_t *world) {
    return guarded([&] {
        auto *r = rt::get("omni_world_size");
        if (!r) return int(OMNI_ESTATE);
        if (world) *world = r->world();
        return int(OMNI_OK);
    });
}

int omni_unit(uint32_t *unit, uint32_t *slot) {
    return guarded([&] {
        auto *r = rt::get("omni_unit");
        if (!r) return int(OMNI_ESTATE);
        if (unit) *unit = r->unit();
        if (slot) *slot = r->slot();
        return int(OMNI_OK);
    });
}

int omni_generation(uint64_t *generation) {
    return guarded([&] {
        auto *r = rt::get("omni_generation");
        if (!r) return int(OMNI_ESTATE);
        if (generation) *generation = r->generation();
        return int(OMNI_OK);
    });
}

int omni_standalone(int *standalone) {
    return guarded([&] {
        auto *r = rt::get("omni_standalone");
        if (!r) return int(OMNI_ESTATE);
        if (standalone) *standalone = r->standalone() ? 1 : 0;
        return int(OMNI_OK);
    });
}

const char *omni_backend(void) {
    try {
        if (!rt::process || !rt::process->runtime) return nullptr;
        // A joiner before omni_start and a rank after OMNI_LEFT have no communicator.
        if (!rt::process->runtime->has_comm()) return nullptr;
        return rt::process->runtime->comm().backend();
    } catch (...) {
        return nullptr;
    }
}

int omni_register_params(float *params, size_t count) {
    return guarded([&] {
        auto *r = rt::get("omni_register_params");
        if (!r) return int(OMNI_ESTATE);
        if (r->started()) return fail(OMNI_ESTATE, "omni_register_params: after omni_start");
        auto st = r->register_params(params, count);
        return st ? int(OMNI_OK) : fail(OMNI_EINVAL, "omni_register_params: " + st.error());
    });
}

int omni_state_add(size_t length, size_t *index) {
    return guarded([&] {
        auto *r = rt::get("omni_state_add");
        if (!r) return int(OMNI_ESTATE);
        if (!index) return fail(OMNI_EINVAL, "omni_state_add: index is NULL");
        if (r->started()) return fail(OMNI_ESTATE, "omni_state_add: after omni_start");
        rt::process->shards.emplace_back();
        auto i = r->register_shard(&rt::process->shards.back(), length);
        if (!i) {
            rt::process->shards.pop_back();
            return fail(OMNI_EINVAL, "omni_state_add: " + i.error());
        }
        *index = i.value();
        return int(OMNI_OK);
    });
}

int omni_state_shard(size_t index, float **data, size_t *begin, size_t *count) {
    return guarded([&] {
        auto *r = rt::get("omni_state_shard");
        if (!r) return int(OMNI_ESTATE);
        if (index >= rt::process->shards.size())
            return fail(OMNI_EINVAL, "omni_state_shard: no vector " + std::to_string(index) + " (" +
                                         std::to_string(rt::process->shards.size()) + " added)");
        auto &v = rt::process->shards[index];
        if (data) *data = v.data();
        if (begin || count) {
            const std::size_t length = r->shard_length(index);
            auto range = r->shard_range(length);
            if (begin) *begin = range.begin;
            if (count) *count = range.size();
        }
        return int(OMNI_OK);
    });
}

int omni_data_configure(uint64_t dataset_size, uint64_t seed, uint64_t global_batch,
                        uint64_t micro_batch) {
    return guarded([&] {
        auto *r = rt::get("omni_data_configure");
        if (!r) return int(OMNI_ESTATE);
        if (r->started()) return fail(OMNI_ESTATE, "omni_data_configure: after omni_start");
        auto st = r->configure_ledger({dataset_size, global_batch, micro_batch, seed});
        return st ? int(OMNI_OK) : fail(OMNI_EINVAL, "omni_data_configure: " + st.error());
    });
}

int omni_data_grad_accum(uint32_t *grad_accum) {
    return guarded([&] {
        auto *r = rt::get("omni_data_grad_accum");
        if (!r) return int(OMNI_ESTATE);
        if (!r->ledger()) return fail(OMNI_ESTATE, "omni_data_grad_accum: no ledger configured");
        if (!grad_accum) return fail(OMNI_EINVAL, "omni_data_grad_accum: NULL argument");
        *grad_accum = r->ledger()->grad_accum();
        return int(OMNI_OK);
    });
}

int omni_data_micro_batch(uint32_t micro, uint64_t *indices, size_t capacity, size_t *count) {
    return guarded([&] {
        auto *r = rt::get("omni_data_micro_batch");
        if (!r) return int(OMNI_ESTATE);
        const auto *l = r->ledger();
        if (!l) return fail(OMNI_ESTATE, "omni_data_micro_batch: no ledger configured");
        if (!count) return fail(OMNI_EINVAL, "omni_data_micro_batch: count is NULL");
        const uint64_t b = l->config().micro_batch;
        *count = static_cast<size_t>(b);
        if (capacity < b)
            return fail(OMNI_ERANGE, "omni_data_micro_batch: capacity " +
                                         std::to_string(capacity) + " is below the micro-batch " +
                                         std::to_string(b));
        if (!indices) return fail(OMNI_EINVAL, "omni_data_micro_batch: indices is NULL");
        auto v = r->micro_batch(micro);
        if (!v) return fail(rt::fault_code(*r), v.error());
        std::memcpy(indices, v.value().data(), v.value().size() * sizeof(uint64_t));
        return int(OMNI_OK);
    });
}

int omni_data_step_samples(uint64_t *indices, size_t capacity, size_t *count, double *time) {
    return guarded([&] {
        auto *r = rt::get("omni_data_step_samples");
        if (!r) return int(OMNI_ESTATE);
        const auto *l = r->ledger();
        if (!l) return fail(OMNI_ESTATE, "omni_data_step_samples: no ledger configured");
        if (!count) return fail(OMNI_EINVAL, "omni_data_step_samples: count is NULL");
        std::vector<std::uint64_t> v;
        double t = 0;
        if (!r->step_plan() && !r->balance_options().active()) {
            // Without a policy: the share's size is known before anything is computed.
            *count = static_cast<size_t>(l->config().global_batch / r->dp_size());
            if (capacity < *count)
                return fail(OMNI_ERANGE, "omni_data_step_samples: capacity " + std::to_string(capacity) +
                                             " is below the " + std::to_string(*count) + " samples");
            auto s = l->share(r->dp_rank());
            if (!s) return fail(OMNI_EINVAL, s.error());
            v = std::move(s).value();
        } else {
            auto p = r->plan();
            if (!p) return fail(rt::fault_code(*r), p.error());
            v = p.value()->samples;
            t = p.value()->lssp ? p.value()->time : static_cast<double>(p.value()->costs[p.value()->dp_rank]);
        }
        *count = v.size();
        if (capacity < v.size())
            return fail(OMNI_ERANGE, "omni_data_step_samples: capacity " + std::to_string(capacity) + " is below the " +
                                         std::to_string(v.size()) + " samples");
        if (!indices && !v.empty()) return fail(OMNI_EINVAL, "omni_data_step_samples: indices is NULL");
        if (!v.empty()) std::memcpy(indices, v.data(), v.size() * sizeof(uint64_t));
        if (time) *time = t;
        return int(OMNI_OK);
    });
}

int omni_data_step_shards(uint64_t *index, uint32_t *degree, uint32_t *shard, size_t capacity, size_t *count) {
    return guarded([&] {
        auto *r = rt::get("omni_data_step_shards");
        if (!r) return int(OMNI_ESTATE);
        if (!r->ledger()) return fail(OMNI_ESTATE, "omni_data_step_shards: no ledger configured");
        if (!count) return fail(OMNI_EINVAL, "omni_data_step_shards: count is NULL");
        *count = 0;
        if (!r->step_plan() && !r->balance_options().lssp) return int(OMNI_OK);
        auto p = r->plan();
        if (!p) return fail(rt::fault_code(*r), p.error());
        const auto &sh = p.value()->shards;
        *count = sh.size();
        if (capacity < sh.size())
            return fail(OMNI_ERANGE, "omni_data_step_shards: capacity " + std::to_string(capacity) + " is below the " +
                                         std::to_string(sh.size()) + " shards");
        if (!sh.empty() && (!index || !degree || !shard))
            return fail(OMNI_EINVAL, "omni_data_step_shards: an output array is NULL");
        for (std::size_t i = 0; i < sh.size(); ++i) {
            index[i] = sh[i].index;
            degree[i] = sh[i].degree;
            shard[i] = sh[i].shard;
        }
        return int(OMNI_OK);
    });
}

int omni_data_balance(const char *policy, omni_cost_fn cost, void *user) {
    return guarded([&] {
        auto *r = rt::get("omni_data_balance");
        if (!r) return int(OMNI_ESTATE);
        if (!policy) return fail(OMNI_EINVAL, "omni_data_balance: policy is NULL");
        auto o = omni::launcher::parse_balance(policy);
        if (!o) return fail(OMNI_EINVAL, "omni_data_balance: " + o.error());
        omni::launcher::CostFn fn;
        if (cost) fn = [cost, user](std::uint64_t index, std::uint64_t step) { return cost(index, step, user); };
        if (auto st = r->configure_balance(o.value(), std::move(fn)); !st)
            return fail(OMNI_EINVAL, "omni_data_balance: " + st.error());
        return int(OMNI_OK);
    });
}

int omni_data_save(char *buffer, size_t capacity, size_t *length) {
    return guarded([&] {
        auto *r = rt::get("omni_data_save");
        if (!r) return int(OMNI_ESTATE);
        if (!r->ledger()) return fail(OMNI_ESTATE, "omni_data_save: no ledger configured");
        if (!length) return fail(OMNI_EINVAL, "omni_data_save: length is NULL");
        std::string text = r->ledger()->serialise();
        *length = text.size() + 1;
        if (capacity < text.size() + 1)
            return fail(OMNI_ERANGE, "omni_data_save: " + std::to_string(text.size() + 1) +
                                         " bytes needed");
        if (!buffer) return fail(OMNI_EINVAL, "omni_data_save: buffer is NULL");
        std::memcpy(buffer, text.c_str(), text.size() + 1);
        return int(OMNI_OK);
    });
}

int omni_data_load(const char *text, size_t length) {
    return guarded([&] {
        auto *r = rt::get("omni_data_load");
        if (!r) return int(OMNI_ESTATE);
        if (!text) return fail(OMNI_EINVAL, "omni_data_load: text is NULL");
        // Malformed text is a format error; a ledger the current world cannot take is not.
        const std::string_view json(text, length);
        if (auto l = omni::launcher::Ledger::load(json); !l)
            return fail(OMNI_EFORMAT, "omni_data_load: " + l.error());
        auto st = r->restore_ledger(json);
        return st ? int(OMNI_OK) : fail(OMNI_EINVAL, "omni_data_load: " + st.error());
    });
}

int omni_request_stop(const char *reason) {
    return guarded([&] {
        auto *r = rt::get("omni_request_stop");
        if (!r) return int(OMNI_ESTATE);
        const std::size_t n = reason ? strnlen(reason, 65) : 0;
        if (n == 0 || n > 64) return fail(OMNI_EINVAL, "omni_request_stop: reason must be 1..64 characters");
        if (r->standalone()) return fail(OMNI_ESTATE, "omni_request_stop: a standalone rank has no job to stop");
        auto st = r->request_stop(std::string(reason, n));
        return st ? int(OMNI_OK) : fail(OMNI_ECOMM, "omni_request_stop: " + st.error());
    });
}

int omni_checkpoint_done(uint64_t step, const char *location) {
    return guarded([&] {
        auto *r = rt::get("omni_checkpoint_done");
        if (!r) return int(OMNI_ESTATE);
        std::string where;
        if (location) {
            const std::size_t n = strnlen(location, omni::launcher::kMaxLocationLength + 1);
            if (n == 0 || n > omni::launcher::kMaxLocationLength)
                return fail(OMNI_EINVAL, "omni_checkpoint_done: location must be 1.." +
                                             std::to_string(omni::launcher::kMaxLocationLength) + " characters");
            where.assign(location, n);
        }
        if (r->standalone()) return fail(OMNI_ESTATE, "omni_checkpoint_done: a standalone rank has no coordinator");
        auto st = r->note_checkpoint(step, where);
        return st ? int(OMNI_OK) : fail(OMNI_ECOMM, "omni_checkpoint_done: " + st.error());
    });
}

int omni_check_member(void) {
    return guarded([&] {
        auto *r = rt::get("omni_check_member");
        if (!r) return int(OMNI_ESTATE);
        auto st = r->check_member();
        return st ? int(OMNI_OK) : fail(OMNI_ECOMM, "omni_check_member: " + st.error());
    });
}

int omni_sockets_begin(void) {
    return guarded([&] {
        auto *r = rt::get("omni_sockets_begin");
        if (!r) return int(OMNI_ESTATE);
        {
            // The program's store connection, opened now if it is not yet: the library's
            // first store call would open it in the window, one socket more than its peers.
            std::lock_guard<std::mutex> lock(store::mu);
            if (!store::endpoint.empty() && !store::get("omni_sockets_begin")) return int(OMNI_ECOMM);
        }
        r->begin_foreign_sockets();
        rt::sockets_begun = true;
        return int(OMNI_OK);
    });
}

int omni_gloo_guarded_device(const char *iface, const char *hostname, void **device) {
    return guarded([&] {
        if (!device) return fail(OMNI_EINVAL, "omni_gloo_guarded_device: device is NULL");
        *device = nullptr;
        gloo::transport::tcp::attr attr;
        if (iface && *iface)
            attr.iface = iface;
        else if (hostname && *hostname)
            attr.hostname = hostname;
        else
            return fail(OMNI_EINVAL, "omni_gloo_guarded_device: expected an interface or a hostname, got neither");
        std::shared_ptr<gloo::transport::Device> d;
        try {
            d = omni::launcher::make_guarded_device(attr);
        } catch (const std::exception &e) {
            return fail(OMNI_ECOMM, std::string("omni_gloo_guarded_device: Gloo's TCP device on ") +
                                        (attr.iface.empty() ? "host " + attr.hostname : "interface " + attr.iface) +
                                        ": " + e.what());
        }
        *device = new std::shared_ptr<gloo::transport::Device>(std::move(d));
        return int(OMNI_OK);
    });
}

int omni_sockets_adopt(uint32_t expected, uint32_t *adopted) {
    return guarded([&] {
        auto *r = rt::get("omni_sockets_adopt");
        if (!r) return int(OMNI_ESTATE);
        if (!rt::sockets_begun) return fail(OMNI_ESTATE, "omni_sockets_adopt: no omni_sockets_begin before it");
        rt::sockets_begun = false;
        const std::size_t n = r->adopt_foreign_sockets(expected);
        if (adopted) *adopted = static_cast<std::uint32_t>(n);
        return int(OMNI_OK);
    });
}

int omni_start(uint64_t *step, int *rewind) {
    return guarded([&] {
        auto *r = rt::get("omni_start");
        if (!r) return int(OMNI_ESTATE);
        if (r->started()) return fail(OMNI_ESTATE, "omni_start: already started");
        auto s = r->start();
        if (!s) return fail(rt::fault_code(*r), s.error());
        if (step) *step = s.value().step;
        if (rewind) *rewind = s.value().rewind ? 1 : 0;
        return int(OMNI_OK);
    });
}

int omni_boundary(uint64_t step, omni_decision *out) {
    return guarded([&] {
        using omni::launcher::Outcome;
        auto *r = rt::get("omni_boundary");
        if (!r) return int(OMNI_ESTATE);
        if (!r->started()) return fail(OMNI_ESTATE, "omni_boundary: call omni_start first");
        if (r->finished())
            return fail(OMNI_ESTATE, "omni_boundary: this rank has stopped or left the job");
        if (const auto *l = r->ledger(); l && l->step() + 1 != step && l->step() != step)
            return fail(OMNI_EINVAL, "omni_boundary: step " + std::to_string(step) +
                                         ", but the ledger has committed " +
                                         std::to_string(l->step()) + " steps");
        auto b = r->boundary(step);
        if (!b) return fail(rt::fault_code(*r), b.error());
        if (out) {
            const auto &v = b.value();
            omni_decision d{};
            switch (v.outcome) {
            case Outcome::Continue: d.kind = OMNI_CONTINUE; break;
            case Outcome::Reshaped: d.kind = OMNI_RESHAPED; break;
            case Outcome::Rewind: d.kind = OMNI_REWIND; break;
            case Outcome::Stop: d.kind = OMNI_STOP; break;
            case Outcome::Left: d.kind = OMNI_LEFT; break;
            }
            d.generation = v.generation;
            d.world = v.world;
            d.rank = v.rank;
            d.previous_world = v.previous_world;
            d.units_joined = static_cast<uint32_t>(v.joining_units.size());
            d.units_left = static_cast<uint32_t>(v.leaving_units.size());
            d.grad_accum = v.grad_accum;
            *out = d;
        }
        return int(OMNI_OK);
    });
}

int omni_group_info(int group, uint32_t *rank, uint32_t *size) {
    return guarded([&] {
        auto *r = rt::get("omni_group_info");
        if (!r) return int(OMNI_ESTATE);
        std::uint32_t rk = 0, sz = 0;
        if (group == OMNI_GROUP_DP) rk = r->dp_rank(), sz = r->dp_size();
        else if (group == OMNI_GROUP_MP) rk = r->mp_rank(), sz = r->mp_size();
        else if (group == OMNI_GROUP_WORLD) rk = r->rank(), sz = r->world();
        else if (const std::uint32_t k = rt::sp_degree(group); k && !(k & (k - 1)) && r->dp_size() % k == 0)
            rk = r->dp_rank() % k, sz = k;
        else if (k)
            return fail(OMNI_EINVAL, "omni_group_info: OMNI_GROUP_SP(" + std::to_string(k) +
                                         "): expected a power of two that divides the DP size " +
                                         std::to_string(r->dp_size()));
        else
            return fail(OMNI_EINVAL, rt::unknown_group("omni_group_info", group));
        if (rank) *rank = rk;
        if (size) *size = sz;
        return int(OMNI_OK);
    });
}

int omni_group_allreduce(int group, void *buffer, size_t count, int dtype, int op) {
    return guarded([&] {
        auto *r = rt::get("omni_allreduce");
        if (!r) return int(OMNI_ESTATE);
        omni::launcher::DType t;
        omni::launcher::ReduceOp o;
        if (!rt::dtype_of(dtype, t) || !rt::op_of(op, o))
            return fail(OMNI_EINVAL, "omni_allreduce: unknown dtype " + std::to_string(dtype) +
                                         " or op " + std::to_string(op));
        if (t == omni::launcher::DType::i64 && o != omni::launcher::ReduceOp::sum)
            return fail(OMNI_EINVAL, "omni_allreduce: OMNI_INT64 takes OMNI_SUM only");
        if (!buffer && count) return fail(OMNI_EINVAL, "omni_allreduce: buffer is NULL");
        omni::launcher::Communicator *c = nullptr;
        if (int rc = rt::comm_of(r, group, "omni_allreduce", &c); rc != OMNI_OK) return rc;
        return rt::comm_result(r, c->allreduce(buffer, count, t, o));
    });
}

int omni_group_broadcast(int group, void *buffer, size_t count, int dtype, uint32_t root) {
    return guarded([&] {
        auto *r = rt::get("omni_broadcast");
        if (!r) return int(OMNI_ESTATE);
        omni::launcher::DType t;
        if (!rt::dtype_of(dtype, t))
            return fail(OMNI_EINVAL, "omni_broadcast: unknown dtype " + std::to_string(dtype));
        if (!buffer && count) return fail(OMNI_EINVAL, "omni_broadcast: buffer is NULL");
        omni::launcher::Communicator *c = nullptr;
        if (int rc = rt::comm_of(r, group, "omni_broadcast", &c); rc != OMNI_OK) return rc;
        if (root >= static_cast<std::uint32_t>(c->size()))
            return fail(OMNI_EINVAL, "omni_broadcast: root " + std::to_string(root) +
                                         " is not a rank of the group's " + std::to_string(c->size()));
        return rt::comm_result(r, c->broadcast(buffer, count, t, static_cast<int>(root)));
    });
}

int omni_group_allgather(int group, const void *send, void *recv, size_t count, int dtype) {
    return guarded([&] {
        auto *r = rt::get("omni_allgather");
        if (!r) return int(OMNI_ESTATE);
        omni::launcher::DType t;
        if (!rt::dtype_of(dtype, t))
            return fail(OMNI_EINVAL, "omni_allgather: unknown dtype " + std::to_string(dtype));
        if ((!send || !recv) && count) return fail(OMNI_EINVAL, "omni_allgather: NULL buffer");
        omni::launcher::Communicator *c = nullptr;
        if (int rc = rt::comm_of(r, group, "omni_allgather", &c); rc != OMNI_OK) return rc;
        return rt::comm_result(r, c->allgather(send, recv, count, t));
    });
}

int omni_group_reduce_scatter(int group, const void *send, void *recv, size_t count, int dtype, int op) {
    return guarded([&] {
        auto *r = rt::get("omni_reduce_scatter");
        if (!r) return int(OMNI_ESTATE);
        omni::launcher::DType t;
        omni::launcher::ReduceOp o;
        if (!rt::dtype_of(dtype, t) || !rt::op_of(op, o))
            return fail(OMNI_EINVAL, "omni_reduce_scatter: unknown dtype " +
                                         std::to_string(dtype) + " or op " + std::to_string(op));
        if (t == omni::launcher::DType::i64 && o != omni::launcher::ReduceOp::sum)
            return fail(OMNI_EINVAL, "omni_reduce_scatter: OMNI_INT64 takes OMNI_SUM only");
        if ((!send || !recv) && count) return fail(OMNI_EINVAL, "omni_reduce_scatter: NULL buffer");
        omni::launcher::Communicator *c = nullptr;
        if (int rc = rt::comm_of(r, group, "omni_reduce_scatter", &c); rc != OMNI_OK) return rc;
        return rt::comm_result(r, c->reduce_scatter(send, recv, count, t, o));
    });
}

int omni_group_barrier(int group) {
    return guarded([&] {
        auto *r = rt::get("omni_barrier");
        if (!r) return int(OMNI_ESTATE);
        omni::launcher::Communicator *c = nullptr;
        if (int rc = rt::comm_of(r, group, "omni_barrier", &c); rc != OMNI_OK) return rc;
        return rt::comm_result(r, c->barrier());
    });
}

// The data-parallel group's: what trainers without model parallelism use.
int omni_allreduce(void *buffer, size_t count, int dtype, int op) {
    return omni_group_allreduce(OMNI_GROUP_DP, buffer, count, dtype, op);
}
int omni_broadcast(void *buffer, size_t count, int dtype, uint32_t root) {
    return omni_group_broadcast(OMNI_GROUP_DP, buffer, count, dtype, root);
}
int omni_allgather(const void *send, void *recv, size_t count, int dtype) {
    return omni_group_allgather(OMNI_GROUP_DP, send, recv, count, dtype);
}
int omni_reduce_scatter(const void *send, void *recv, size_t count, int dtype, int op) {
    return omni_group_reduce_scatter(OMNI_GROUP_DP, send, recv, count, dtype, op);
}
int omni_barrier(void) { return omni_group_barrier(OMNI_GROUP_DP); }

int omni_store_set(uint64_t generation, const char *key, const void *value, size_t length) {
    return guarded([&] {
        std::string k;
        if (!store::key_of("omni_store_set", key, k)) return int(OMNI_EINVAL);
        if (!value && length) return fail(OMNI_EINVAL, "omni_store_set: value is NULL");
        if (length > omni::launcher::kMaxValueBytes)
            return fail(OMNI_EINVAL, "omni_store_set: a value of " + std::to_string(length) + " bytes; at most " +
                                         std::to_string(omni::launcher::kMaxValueBytes));
        std::lock_guard<std::mutex> lock(store::mu);
        auto *c = store::get("omni_store_set");
        if (!c) return int(OMNI_ESTATE);
        auto st = c->kv_set(generation, k, std::string(static_cast<const char *>(value), length), store::kCallMs);
        return st ? int(OMNI_OK) : fail(OMNI_ECOMM, "omni_store_set: " + st.error());
    });
}

int omni_store_get(uint64_t generation, const char *key, void *buffer, size_t capacity, size_t *length,
                   int64_t timeout_ms) {
    return guarded([&] {
        std::string k;
        if (!store::key_of("omni_store_get", key, k)) return int(OMNI_EINVAL);
        if (!length) return fail(OMNI_EINVAL, "omni_store_get: length is NULL");
        if (!buffer && capacity) return fail(OMNI_EINVAL, "omni_store_get: buffer is NULL");
        if (int rc = store::timeout_of("omni_store_get", timeout_ms)) return rc;
        std::lock_guard<std::mutex> lock(store::mu);
        auto *c = store::get("omni_store_get");
        if (!c) return int(OMNI_ESTATE);
        auto v = c->kv_get(generation, k, timeout_ms);
        if (!v) return fail(OMNI_ECOMM, "omni_store_get: " + v.error());
        *length = v.value().size();
        if (capacity < v.value().size())
            return fail(OMNI_ERANGE, "omni_store_get: the value holds " + std::to_string(v.value().size()) +
                                         " bytes, the buffer " + std::to_string(capacity));
        if (!v.value().empty()) std::memcpy(buffer, v.value().data(), v.value().size());
        return int(OMNI_OK);
    });
}

int omni_store_add(uint64_t generation, const char *key, int64_t amount, int64_t *value) {
    return guarded([&] {
        std::string k;
        if (!store::key_of("omni_store_add", key, k)) return int(OMNI_EINVAL);
        if (amount > omni::launcher::kMaxKvAdd || amount < -omni::launcher::kMaxKvAdd)
            return fail(OMNI_EINVAL, "omni_store_add: amount " + std::to_string(amount) + " is beyond +-" +
                                         std::to_string(omni::launcher::kMaxKvAdd));
        std::lock_guard<std::mutex> lock(store::mu);
        auto *c = store::get("omni_store_add");
        if (!c) return int(OMNI_ESTATE);
        auto v = c->kv_add(generation, k, amount, store::kCallMs);
        if (!v) return fail(OMNI_ECOMM, "omni_store_add: " + v.error());
        if (value) *value = v.value();
        return int(OMNI_OK);
    });
}

int omni_store_wait(uint64_t generation, const char *const *keys, size_t count, int64_t timeout_ms) {
    return guarded([&] {
        if (!keys || count == 0 || count > omni::launcher::kMaxWaitKeys)
            return fail(OMNI_EINVAL, "omni_store_wait: expected 1.." + std::to_string(omni::launcher::kMaxWaitKeys) +
                                         " keys");
        std::vector<std::string> ks(count);
        for (size_t i = 0; i < count; ++i)
            if (!store::key_of("omni_store_wait", keys[i], ks[i])) return int(OMNI_EINVAL);
        if (int rc = store::timeout_of("omni_store_wait", timeout_ms)) return rc;
        std::lock_guard<std::mutex> lock(store::mu);
        auto *c = store::get("omni_store_wait");
        if (!c) return int(OMNI_ESTATE);
        auto st = c->kv_wait(generation, ks, timeout_ms);
        return st ? int(OMNI_OK) : fail(OMNI_ECOMM, "omni_store_wait: " + st.error());
    });
}

int omni_set_cuda_stream(void *stream) {
    return guarded([&] {
        auto *r = rt::get("omni_set_cuda_stream");
        if (!r) return int(OMNI_ESTATE);
        auto st = r->set_cuda_stream(stream);
        return st ? int(OMNI_OK) : fail(OMNI_EINVAL, "omni_set_cuda_stream: " + st.error());
    });
}

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
    return guarded([&] {
        if (!ledger || !grad_accum) return fail(OMNI_EINVAL, "omni_ledger_grad_accum: NULL argument");
        *grad_accum = ledger->ledger.grad_accum();
        return int(OMNI_OK);
    });
}

int omni_ledger_position(const omni_ledger *ledger, uint64_t *step, uint64_t *epoch,
                         uint64_t *consumed_in_epoch) {
    return guarded([&] {
        if (!ledger) return fail(OMNI_EINVAL, "omni_ledger_position: ledger is NULL");
        if (step) *step = ledger->ledger.step();
        if (epoch) *epoch = ledger->ledger.epoch();
        if (consumed_in_epoch) *consumed_in_epoch = ledger->ledger.consumed_in_epoch();
        return int(OMNI_OK);
    });
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

// libomni for C++ trainers outside the slurm-omni tree: a header-only layer over the C API of
// omni/omni.h (see libomni(3) for every contract). It adds ownership (Session calls
// omni_init and omni_finalize) and turns failed calls into omni::api_error exceptions that
// carry the omni_status and omni_last_error(). The C API itself never throws.
//
// Trainers inside the tree use the runtime's own C++ class, launcher/runtime.h, directly.
#ifndef OMNI_OMNI_HPP
#define OMNI_OMNI_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "omni/omni.h"

namespace omni {

class api_error : public std::runtime_error {
public:
    api_error(int status, const std::string &what) : std::runtime_error(what), status_(status) {}
    int status() const noexcept { return status_; }  // an omni_status

private:
    int status_;
};

namespace detail {
inline void check(int rc, const char *call) {
    if (rc != OMNI_OK) throw api_error(rc, std::string(call) + ": " + omni_last_error());
}
}  // namespace detail

// One per process: the rank runtime from omni_init() to omni_finalize().
class Session {
public:
    Session() { detail::check(omni_init(), "omni_init"); }
    ~Session() { omni_finalize(); }
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    std::uint32_t rank() const { return get32(omni_rank, "omni_rank"); }
    std::uint32_t world() const { return get32(omni_world_size, "omni_world_size"); }
    std::uint64_t generation() const {
        std::uint64_t g = 0;
        detail::check(omni_generation(&g), "omni_generation");
        return g;
    }
    bool standalone() const {
        int s = 0;
        detail::check(omni_standalone(&s), "omni_standalone");
        return s != 0;
    }
    std::string backend() const {
        const char *b = omni_backend();
        return b ? b : "";
    }

    void register_params(float *params, std::size_t count) {
        detail::check(omni_register_params(params, count), "omni_register_params");
    }
    std::size_t add_state(std::size_t length) {
        std::size_t index = 0;
        detail::check(omni_state_add(length, &index), "omni_state_add");
        return index;
    }
    struct Shard {
        float *data = nullptr;
        std::size_t begin = 0, count = 0;
    };
    // Valid until the next RESHAPED or REWIND boundary.
    Shard shard(std::size_t index) const {
        Shard s;
        detail::check(omni_state_shard(index, &s.data, &s.begin, &s.count), "omni_state_shard");
        return s;
    }

    void configure_data(std::uint64_t dataset_size, std::uint64_t seed,
                        std::uint64_t global_batch = 0, std::uint64_t micro_batch = 0) {
        detail::check(omni_data_configure(dataset_size, seed, global_batch, micro_batch),
                      "omni_data_configure");
    }
    // Grouped reordering (omni_data_balance): the policy and each sample's cost.
    void balance(const char *policy, omni_cost_fn cost = nullptr, void *user = nullptr) {
        detail::check(omni_data_balance(policy, cost, user), "omni_data_balance");
    }
    // This replica's samples in the current step, any policy (omni_data_step_samples).
    std::vector<std::uint64_t> step_samples(double *time = nullptr) const {
        std::size_t n = 0;
        int rc = omni_data_step_samples(nullptr, 0, &n, nullptr);  // asks for the count
        if (rc != OMNI_ERANGE && rc != OMNI_OK) detail::check(rc, "omni_data_step_samples");
        std::vector<std::uint64_t> out(n);
        detail::check(omni_data_step_samples(out.data(), out.size(), &n, time), "omni_data_step_samples");
        return out;
    }
    std::uint32_t grad_accum() const { return get32(omni_data_grad_accum, "omni_data_grad_accum"); }
    std::vector<std::uint64_t> micro_batch(std::uint32_t micro) const {
        std::size_t n = 0;
        int rc = omni_data_micro_batch(micro, nullptr, 0, &n);  // asks for b
        if (rc != OMNI_ERANGE && rc != OMNI_OK) detail::check(rc, "omni_data_micro_batch");
        std::vector<std::uint64_t> out(n);
        detail::check(omni_data_micro_batch(micro, out.data(), out.size(), &n),
                      "omni_data_micro_batch");
        return out;
    }

    struct Start {
        std::uint64_t step = 0;
        bool rewind = false;
    };
    Start start() {
        Start s;
        int rewind = 0;
        detail::check(omni_start(&s.step, &rewind), "omni_start");
        s.rewind = rewind != 0;
        return s;
    }
    omni_decision boundary(std::uint64_t step) {
        omni_decision d{};
        detail::check(omni_boundary(step, &d), "omni_boundary");
        return d;
    }
    // The whole job stops at the next boundary (omni_request_stop).
    void request_stop(const char *reason) { detail::check(omni_request_stop(reason), "omni_request_stop"); }
    // A committed checkpoint, for omni-ctl status and the metrics (omni_checkpoint_done).
    void checkpoint_done(std::uint64_t step, const char *location = nullptr) {
        detail::check(omni_checkpoint_done(step, location), "omni_checkpoint_done");
    }

    // A group's rank and size (omni_group_info): OMNI_GROUP_DP, OMNI_GROUP_MP, OMNI_GROUP_WORLD,
    // OMNI_GROUP_SP(k); the collectives below take the same groups.
    struct GroupInfo {
        std::uint32_t rank = 0, size = 0;
    };
    GroupInfo group(int g) const {
        GroupInfo i;
        detail::check(omni_group_info(g, &i.rank, &i.size), "omni_group_info");
        return i;
    }

    // Collectives on a group's current communicator (host memory with Gloo); the data-parallel
    // group by default.
    void allreduce(void *buf, std::size_t count, omni_dtype t, omni_reduce_op op = OMNI_SUM,
                   int g = OMNI_GROUP_DP) {
        detail::check(omni_group_allreduce(g, buf, count, t, op), "omni_allreduce");
    }
    void broadcast(void *buf, std::size_t count, omni_dtype t, std::uint32_t root, int g = OMNI_GROUP_DP) {
        detail::check(omni_group_broadcast(g, buf, count, t, root), "omni_broadcast");
    }
    void allgather(const void *send, void *recv, std::size_t count, omni_dtype t, int g = OMNI_GROUP_DP) {
        detail::check(omni_group_allgather(g, send, recv, count, t), "omni_allgather");
    }
    void reduce_scatter(const void *send, void *recv, std::size_t count, omni_dtype t,
                        omni_reduce_op op = OMNI_SUM, int g = OMNI_GROUP_DP) {
        detail::check(omni_group_reduce_scatter(g, send, recv, count, t, op), "omni_reduce_scatter");
    }
    void barrier(int g = OMNI_GROUP_DP) { detail::check(omni_group_barrier(g), "omni_barrier"); }

private:
    static std::uint32_t get32(int (*f)(std::uint32_t *), const char *call) {
        std::uint32_t v = 0;
        detail::check(f(&v), call);
        return v;
    }
};

}  // namespace omni

#endif

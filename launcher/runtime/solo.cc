// The standalone communicator and the PMIx session; see runtime/solo.h.
#include "runtime/solo.h"

#include <pmix.h>

#include <cstdlib>
#include <cstring>

#include "coord/log.h"

namespace omni::launcher {

namespace {

class SoloCommunicator final : public Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const char *backend() const override { return "solo"; }
    // The sum or mean over one rank is the rank's own buffer.
    Status allreduce(void *, std::size_t, DType, ReduceOp) override { return Status::success(); }
    Status broadcast(void *, std::size_t, DType, int root) override {
        if (root != 0) return make_error("broadcast: root " + std::to_string(root) + " of 1 rank");
        return Status::success();
    }
    Status allgather(const void *send, void *recv, std::size_t count, DType type) override {
        if (count && send != recv) std::memmove(recv, send, count * dtype_size(type));
        return Status::success();
    }
    Status reduce_scatter(const void *send, void *recv, std::size_t count, DType type,
                          ReduceOp) override {
        if (count && send != recv) std::memmove(recv, send, count * dtype_size(type));
        return Status::success();
    }
    Status barrier() override { return Status::success(); }
    // One rank has no peer: only empty exchanges are valid.
    Status exchange(const std::vector<PeerSend> &sends,
                    const std::vector<PeerRecv> &recvs) override {
        if (!sends.empty() || !recvs.empty())
            return make_error("exchange: a single rank has no peer to send to or receive from");
        return Status::success();
    }
};

}  // namespace

std::unique_ptr<Communicator> make_solo_communicator() {
    return std::make_unique<SoloCommunicator>();
}

std::vector<std::uint32_t> PmixSession::local_peers() const {
    std::vector<std::uint32_t> out;
    if (!initialised_) return out;
    pmix_proc_t wild;
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, nspace_.c_str(), PMIX_RANK_WILDCARD);
    pmix_value_t *val = nullptr;
    if (PMIx_Get(&wild, PMIX_LOCAL_PEERS, nullptr, 0, &val) == PMIX_SUCCESS && val && val->type == PMIX_STRING &&
        val->data.string) {
        // "0,1,5": this node's ranks.
        const std::string list = val->data.string;
        std::size_t pos = 0;
        while (pos < list.size()) {
            std::size_t end = list.find(',', pos);
            if (end == std::string::npos) end = list.size();
            const std::string item = list.substr(pos, end - pos);
            if (!item.empty() && item.size() <= 9 && item.find_first_not_of("0123456789") == std::string::npos)
                out.push_back(static_cast<std::uint32_t>(std::stoul(item)));
            pos = end + 1;
        }
    }
    if (val) PMIX_VALUE_RELEASE(val);
    return out;
}

Result<std::unique_ptr<PmixSession>> PmixSession::open() {
    std::unique_ptr<PmixSession> s(new PmixSession());
    if (!std::getenv("PMIX_NAMESPACE") || !std::getenv("PMIX_RANK")) return s;
    pmix_proc_t me;
    PMIX_PROC_CONSTRUCT(&me);
    pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
    if (rc != PMIX_SUCCESS)
        return make_error(std::string("PMIx_Init failed: ") + PMIx_Error_string(rc) +
                          " (PMIX_NAMESPACE is set: is the srun step's PMIx server gone?)");
    s->initialised_ = true;
    pmix_proc_t wild;
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = nullptr;
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, nullptr, 0, &val);
    if (rc != PMIX_SUCCESS || !val || val->type != PMIX_UINT32) {
        if (val) PMIX_VALUE_RELEASE(val);
        return make_error(std::string("PMIx_Get(PMIX_JOB_SIZE) failed: ") +
                          PMIx_Error_string(rc));
    }
    s->id_.size = val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    s->id_.rank = me.rank;
    s->id_.from_pmix = true;
    s->nspace_ = me.nspace;
    if (s->id_.size == 0 || s->id_.rank >= s->id_.size)
        return make_error("PMIx reports rank " + std::to_string(s->id_.rank) + " of " +
                          std::to_string(s->id_.size));
    log_line(LogLevel::Info, "libomni",
             "PMIx: rank " + std::to_string(s->id_.rank) + " of " + std::to_string(s->id_.size) +
                 " in namespace " + me.nspace);
    return s;
}

PmixSession::~PmixSession() {
    if (initialised_) PMIx_Finalize(nullptr, 0);
}

}  // namespace omni::launcher

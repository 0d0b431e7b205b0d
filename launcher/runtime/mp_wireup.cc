// The MP group's wire-up through PMIx, and the broadcast store; see runtime/mp_wireup.h.
#include "runtime/mp_wireup.h"

#include <pmix.h>

#include <gloo/common/error.h>

#include <algorithm>
#include <stdexcept>

#include "runtime/handoff.h"

namespace omni::launcher {

std::vector<std::vector<char>> pmix_exchange(const std::string &nspace, const std::vector<std::uint32_t> &procs,
                                             const std::string &key, const std::vector<char> &blob,
                                             std::chrono::milliseconds timeout, FenceScope scope) {
    auto fail = [&](const std::string &what, pmix_status_t rc) {
        throw std::runtime_error("PMIx: " + what + " (" + key + "): " + PMIx_Error_string(rc));
    };
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = const_cast<char *>(blob.data());
    v.data.bo.size = blob.size();
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);  // copies the bytes
    if (rc != PMIX_SUCCESS) fail("PMIx_Put", rc);
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS) fail("PMIx_Commit", rc);
    std::vector<pmix_proc_t> group(procs.size());
    for (std::size_t i = 0; i < procs.size(); ++i) {
        PMIX_PROC_CONSTRUCT(&group[i]);
        PMIX_LOAD_PROCID(&group[i], nspace.c_str(), procs[i]);
    }
    const int seconds = static_cast<int>(std::max<std::int64_t>(1, (timeout.count() + 999) / 1000));
    bool collect = true;
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
    pmix_proc_t all;
    PMIX_PROC_CONSTRUCT(&all);
    PMIX_LOAD_PROCID(&all, nspace.c_str(), PMIX_RANK_WILDCARD);
    const bool whole = scope == FenceScope::namespace_;
    rc = whole ? PMIx_Fence(&all, 1, info, 2) : PMIx_Fence(group.data(), group.size(), info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS)
        fail("PMIx_Fence over " + (whole ? "every process" : std::to_string(group.size()) + " processes") + " of " +
                 nspace,
             rc);
    std::vector<std::vector<char>> out;
    for (const pmix_proc_t &p : group) {
        pmix_value_t *val = nullptr;
        rc = PMIx_Get(&p, key.c_str(), nullptr, 0, &val);  // collected by the fence
        if (rc != PMIX_SUCCESS || !val || val->type != PMIX_BYTE_OBJECT) {
            if (val) PMIX_VALUE_RELEASE(val);
            fail("PMIx_Get from rank " + std::to_string(p.rank) + " of " + nspace, rc);
        }
        out.emplace_back(val->data.bo.bytes, val->data.bo.bytes + val->data.bo.size);
        PMIX_VALUE_RELEASE(val);
    }
    return out;
}

void BroadcastStore::set(const std::string &key, const std::vector<char> &data) {
    if (comm_.rank() != 0) throw gloo::IoException("broadcast store: only rank 0 sets ('" + key + "')");
    std::string bytes(data.begin(), data.end());
    if (auto st = broadcast_bytes(comm_, bytes, 0, max_); !st)
        throw gloo::IoException("broadcast store: '" + key + "': " + st.error());
}

std::vector<char> BroadcastStore::get(const std::string &key) {
    std::string bytes;
    if (auto st = broadcast_bytes(comm_, bytes, 0, max_); !st)
        throw gloo::IoException("broadcast store: '" + key + "': " + st.error());
    return std::vector<char>(bytes.begin(), bytes.end());
}

}  // namespace omni::launcher

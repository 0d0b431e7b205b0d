// Rendezvous over PMIx and over a communicator; see runtime/pmix_store.h.
#include "runtime/pmix_store.h"

#include <pmix.h>

#include <gloo/common/error.h>

#include <algorithm>
#include <cstring>

#include "runtime/handoff.h"

namespace omni::launcher {

namespace {

[[noreturn]] void fail(const std::string &what) { throw gloo::IoException("PMIx store: " + what); }

}  // namespace

std::optional<std::size_t> key_owner(const std::string &key) {
    std::size_t i = key.size();
    while (i > 0 && key[i - 1] >= '0' && key[i - 1] <= '9') --i;
    if (i == key.size() || key.size() - i > 9) return std::nullopt;
    return static_cast<std::size_t>(std::stoul(key.substr(i)));
}

PmixStore::PmixStore(std::string nspace, std::vector<std::uint32_t> procs, std::string prefix,
                     std::chrono::milliseconds timeout)
    : nspace_(std::move(nspace)), procs_(std::move(procs)), prefix_(std::move(prefix)), timeout_(timeout) {}

void PmixStore::set(const std::string &key, const std::vector<char> &data) {
    const std::string k = "omni." + prefix_ + "." + key;
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = const_cast<char *>(data.data());
    v.data.bo.size = data.size();
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, k.c_str(), &v);  // copies the bytes
    if (rc != PMIX_SUCCESS) fail("PMIx_Put(" + k + "): " + PMIx_Error_string(rc));
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) fail(std::string("PMIx_Commit: ") + PMIx_Error_string(rc));
    std::vector<pmix_proc_t> group(procs_.size());
    for (std::size_t i = 0; i < procs_.size(); ++i) {
        PMIX_PROC_CONSTRUCT(&group[i]);
        PMIX_LOAD_PROCID(&group[i], nspace_.c_str(), procs_[i]);
    }
    const int seconds = static_cast<int>(std::max<std::int64_t>(1, (timeout_.count() + 999) / 1000));
    bool collect = true;
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
    rc = PMIx_Fence(group.data(), group.size(), info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS)
        fail("PMIx_Fence over the group's " + std::to_string(group.size()) + " processes of " + nspace_ +
             " after setting " + k + ": " + PMIx_Error_string(rc));
}

std::vector<char> PmixStore::get(const std::string &key) {
    const auto owner = key_owner(key);
    if (!owner || *owner >= procs_.size())
        fail("'" + key + "' names no member of a group of " + std::to_string(procs_.size()));
    const std::string k = "omni." + prefix_ + "." + key;
    pmix_proc_t p;
    PMIX_PROC_CONSTRUCT(&p);
    PMIX_LOAD_PROCID(&p, nspace_.c_str(), procs_[*owner]);
    const int seconds = static_cast<int>(std::max<std::int64_t>(1, (timeout_.count() + 999) / 1000));
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &seconds, PMIX_INT);
    pmix_value_t *val = nullptr;
    const pmix_status_t rc = PMIx_Get(&p, k.c_str(), &info, 1, &val);  // collected by set()'s fence
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS || !val || val->type != PMIX_BYTE_OBJECT) {
        if (val) PMIX_VALUE_RELEASE(val);
        fail("PMIx_Get(" + k + ") from rank " + std::to_string(p.rank) + " of " + nspace_ + ": " +
             PMIx_Error_string(rc));
    }
    std::vector<char> out(val->data.bo.bytes, val->data.bo.bytes + val->data.bo.size);
    PMIX_VALUE_RELEASE(val);
    return out;
}

void PmixStore::wait(const std::vector<std::string> &keys) { wait(keys, timeout_); }

void PmixStore::wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) {
    for (const auto &k : keys) (void)get(k);  // set()'s fence made every key there is visible
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

// verify's check of each shard file's own record: /omni_shard (the manifest the writer left
// for the commit) and the rank states beside it.
//
// What the record is for: the commit reads it when it runs in another process than the
// writer, checks it and copies it into the index; from then on the index is the only
// manifest anything reads (loads, merge, reshard, gc, incremental bases). A damaged record
// therefore does not stop a load, but it is a damaged file, and verify's answer is about
// every byte a checkpoint's files hold of slurm-omni's: it reports the record's checksum,
// its parse, its rank states' checksums, and any slice the index names in the file that the
// record gives another place or checksum.
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "format.h"
#include "fsio.h"
#include "index.h"
#include "omni/ckpt_cpp.h"

namespace omni {
namespace ckpt {

namespace {

using SliceKey = std::tuple<std::string, Shape, Shape>;   // dataset, offset, count

}  // namespace

void check_shard_records(const Manifest &man, const std::string &ckpt_dir, const std::set<std::string> &skip,
                         VerifyReport &rep) {
    // The index's sources by file: what each record must say of the slices in its file.
    std::map<std::string, std::map<SliceKey, std::pair<std::string, std::uint64_t>>> by_file;
    for (const auto &t : man.tensors)
        for (const auto &s : t.sources)
            by_file[fsio::join(ckpt_dir, s.file)][{s.dataset, s.offset, s.count}] = {t.name, s.xxh3};
    for (const auto &[path, slices] : by_file) {
        if (skip.count(path)) continue;   // missing or unreadable: reported with its slices
        auto rec = read_shard(path);
        if (!rec) {
            std::string why = rec.error();
            if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);   // the file is named once
            rep.issues.push_back({"", path, "the shard's own manifest (/" + std::string(kShardManifestDataset) +
                                                ", the record the commit was made from): " + why});
            continue;
        }
        const ShardManifest &m = rec.value().manifest;
        std::map<SliceKey, std::uint64_t> recorded;
        for (const auto &t : m.tensors)
            for (const auto &s : t.sources) recorded[{s.dataset, s.offset, s.count}] = s.xxh3;
        for (const auto &[key, named] : slices) {
            auto it = recorded.find(key);
            const std::string slice = std::get<0>(key) + " offset " + shape_string(std::get<1>(key)) + " count " +
                                      shape_string(std::get<2>(key));
            if (it == recorded.end())
                rep.issues.push_back({named.first, path, "the shard's own manifest does not record " + slice +
                                                             ", which the index names in this file"});
            else if (it->second != named.second)
                rep.issues.push_back({named.first, path, "the shard's own manifest gives " + slice +
                                                             " checksum " + hex64(it->second) + ", the index " +
                                                             hex64(named.second)});
        }
        for (std::size_t i = 0; i < m.rank_states.size() && i < rec.value().states.size(); ++i) {
            auto st = check_rank_state(path, m.rank_states[i], rec.value().states[i]);
            if (!st) rep.issues.push_back({"", path, st.error()});
        }
    }
}

}  // namespace ckpt
}  // namespace omni

// Listing a checkpoint root (omni-ckpt ls) and retention (omni-ckpt gc).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "format.h"
#include "fsio.h"
#include "index.h"
#include "omni/ckpt_cpp.h"

namespace omni {
namespace ckpt {

namespace {

std::uint64_t dir_bytes(const std::string &dir) {
    std::uint64_t n = 0;
    auto names = fsio::list_dir(dir);
    if (!names) return 0;
    for (const auto &f : names.value())
        if (auto s = fsio::file_size(fsio::join(dir, f))) n += s.value();
    return n;
}

// Seconds since anything in a checkpoint directory changed. A writer appending to a large
// shard for minutes updates the file's mtime but not the directory's, and gc must see it
// as in flight.
std::uint64_t youngest_age(const std::string &dir) {
    auto age = fsio::age_seconds(dir);
    std::uint64_t youngest = age ? age.value() : 0;
    if (auto names = fsio::list_dir(dir))
        for (const auto &n : names.value())
            if (auto a = fsio::age_seconds(fsio::join(dir, n))) youngest = std::min(youngest, a.value());
    return youngest;
}

std::function<void()> &gc_before_latest_hook() {
    static std::function<void()> hook;
    return hook;
}

}  // namespace

void set_gc_before_latest_hook(std::function<void()> hook) { gc_before_latest_hook() = std::move(hook); }

Result<std::vector<CheckpointEntry>> list(const std::string &root) {
    if (!fsio::is_dir(root)) return make_error(root + ": not a directory (expected a checkpoint root)");
    auto names = fsio::list_dir(root);
    if (!names) return make_error(names.error());
    std::vector<CheckpointEntry> out;
    for (const auto &name : names.value()) {
        const std::string path = fsio::join(root, name);
        if (!fsio::is_dir(path) || name == kLatestLink) continue;
        CheckpointEntry e;
        e.name = name;
        e.path = path;
        if (auto step = parse_step_dir_name(name)) {
            e.step = *step;
            // Only a missing index.h5 makes a step directory incomplete (gc retires it). An
            // index that exists but cannot be read now (another process holds HDF5's lock on
            // it, a newer format, EACCES, EIO) belongs to a committed checkpoint that gc must
            // not remove and open_latest must not skip.
            struct stat st;
            const std::string index = fsio::join(path, kIndexFile);
            const int stat_err = ::stat(index.c_str(), &st) == 0 ? 0 : errno;
            if (stat_err == ENOENT) {
                e.problem = "no index.h5: retired by gc (it keeps only files that newer "
                            "checkpoints reference) or damaged";
            } else {
                e.complete = true;
                auto m = stat_err ? Result<Manifest>(make_error(index + ": " + std::strerror(stat_err)))
                                  : read_index(path);
                Status consistent = m ? check_index_step(path, m.value()) : Status(make_error(m.error()));
                if (!consistent) {
                    e.unreadable = true;
                    e.problem = "unreadable: " + consistent.error();
                } else {
                    const Manifest &man = m.value();
                    e.writers = man.writers;
                    e.generation = man.meta.generation;
                    e.world_size = man.meta.world_size;
                    std::set<std::string> bases;
                    for (const auto &t : man.tensors)
                        for (const auto &s : t.sources) {
                            const std::string b = file_ref_checkpoint(s.file);
                            if (b.empty()) continue;
                            bases.insert(b);
                            e.referenced_bytes += element_count(s.count) * dtype_size(t.dtype);
                        }
                    e.bases.assign(bases.begin(), bases.end());
                }
            }
        } else if (auto pstep = parse_partial_dir_name(name)) {
            e.step = *pstep;
            e.problem = "partial: never committed (being written, or its writer died)";
        } else {
            continue;   // not ours
        }
        e.bytes = dir_bytes(path);
        e.age_seconds = youngest_age(path);
        out.push_back(std::move(e));
    }
    std::sort(out.begin(), out.end(), [](const CheckpointEntry &a, const CheckpointEntry &b) {
        return a.step != b.step ? a.step < b.step : a.name < b.name;
    });
    for (auto it = out.rbegin(); it != out.rend(); ++it)
        if (it->complete) {
            it->latest = true;
            break;
        }
    return out;
}

Result<GcReport> gc(const std::string &root, const GcPolicy &policy) {
    if (policy.keep_last == 0)
        return make_error("gc: keep must be at least 1 (the newest complete checkpoint is always kept)");
    auto listed = list(root);
    if (!listed) return make_error(listed.error());
    const auto &entries = listed.value();

    GcReport rep;
    for (const auto &e : entries)
        if (e.unreadable) rep.unreadable.push_back(e.name + ": " + e.problem);
    if (!rep.unreadable.empty()) {
        // gc cannot tell which files of other checkpoints an unreadable one references, so it
        // keeps every committed and retired directory. Partial directories are never
        // referenced (a base is always committed), so those past the grace time still go.
        for (const auto &e : entries) {
            if (!parse_partial_dir_name(e.name)) {
                if (e.complete) rep.kept.push_back(e.name);
                continue;
            }
            if (e.age_seconds < policy.grace_seconds) {
                rep.skipped.push_back(e.name);
                continue;
            }
            if (!policy.dry_run)
                if (auto st = fsio::remove_tree(e.path); !st) return make_error("gc: " + st.error());
            rep.bytes_freed += e.bytes;
            rep.removed.push_back(e.name);
        }
        if (!policy.dry_run) {
            if (auto hook = gc_before_latest_hook()) hook();
            if (auto st = update_latest(root); !st) return make_error("gc: " + st.error());
            (void)fsio::fsync_path(root);
        }
        return rep;
    }

    std::set<std::string> kept;
    std::vector<const CheckpointEntry *> complete;
    for (const auto &e : entries)
        if (e.complete) complete.push_back(&e);
    for (std::size_t i = 0; i < complete.size(); ++i) {
        const bool recent = i + policy.keep_last >= complete.size();
        const bool every = policy.keep_every && complete[i]->step % policy.keep_every == 0;
        if (recent || every) kept.insert(complete[i]->name);
    }
    // Files the kept checkpoints read, as "DIR/FILE" relative to the root.
    std::set<std::string> referenced;
    for (const auto &e : entries) {
        if (!kept.count(e.name)) continue;
        auto m = read_index(e.path);
        if (!m) return make_error("gc: " + m.error());   // listed complete a moment ago
        referenced.insert(e.name + "/" + kIndexFile);
        for (const auto &t : m.value().tensors)
            for (const auto &s : t.sources) {
                const std::string b = file_ref_checkpoint(s.file);
                referenced.insert(b.empty() ? e.name + "/" + s.file
                                            : b + "/" + fsio::basename(s.file));
            }
    }

    rep.kept.assign(kept.begin(), kept.end());
    for (const auto &e : entries) {
        if (kept.count(e.name)) continue;
        const bool partial = !parse_step_dir_name(e.name).has_value();
        if (partial && e.age_seconds < policy.grace_seconds) {
            rep.skipped.push_back(e.name);
            continue;
        }
        auto names = fsio::list_dir(e.path);
        if (!names) return make_error("gc: " + names.error());
        // The index goes first: interrupted half-way, the directory reads as incomplete
        // rather than as a complete checkpoint with missing files.
        std::vector<std::string> order = names.value();
        std::stable_partition(order.begin(), order.end(), [](const std::string &n) { return n == kIndexFile; });
        bool retains = false;
        std::vector<std::string> removed_here;
        for (const auto &n : order) {
            if (referenced.count(e.name + "/" + n)) {
                retains = true;
                continue;
            }
            const std::string p = fsio::join(e.path, n);
            std::uint64_t size = 0;
            if (auto s = fsio::file_size(p)) size = s.value();
            if (!policy.dry_run)
                if (auto st = fsio::remove_tree(p); !st) return make_error("gc: " + st.error());
            rep.bytes_freed += size;
            removed_here.push_back(p);
        }
        if (retains) {
            rep.retained_for_references.push_back(e.name);
            rep.removed_files.insert(rep.removed_files.end(), removed_here.begin(), removed_here.end());
        } else {
            if (!policy.dry_run)
                if (auto st = fsio::remove_tree(e.path); !st) return make_error("gc: " + st.error());
            rep.removed.push_back(e.name);
        }
    }
    // Keep `latest` pointing at the newest complete checkpoint: a crash between a commit's
    // rename and its link update may have left it on an older one that was just removed. The
    // root is looked at again now, not as listed above: a checkpoint committed while gc ran
    // is newer than anything in that listing.
    if (!policy.dry_run) {
        if (auto hook = gc_before_latest_hook()) hook();
        if (auto st = update_latest(root); !st) return make_error("gc: " + st.error());
    }
    // Durability of the removals is not needed for safety: a resurrected file is removed by
    // the next gc.
    if (!policy.dry_run) (void)fsio::fsync_path(root);
    return rep;
}

}  // namespace ckpt
}  // namespace omni

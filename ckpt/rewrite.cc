// merge and reshard: rewrite a checkpoint into a new, self-contained one.
//
// Both read every logical tensor through a verifying Reader (so a corrupt or missing source
// fails the rewrite instead of being copied) and write through ShardWriter + commit, so the
// output goes through the same atomic commit as a training checkpoint.
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "box.h"
#include "format.h"
#include "fsio.h"
#include "index.h"
#include "omni/ckpt_cpp.h"
#include "writer_internal.h"

namespace omni {
namespace ckpt {

namespace {

struct Assignment {
    const TensorInfo *tensor;
    Box box;
};

using Layout = std::vector<std::vector<Assignment>>;   // per writer

// The absolute path `out` will have once created: the real path of its nearest existing
// ancestor with the rest appended ("x/.." of a directory still to be made is its parent).
// "" if no ancestor resolves.
std::string resolved_output(const std::string &out) {
    std::vector<std::string> rest;
    std::string p = out;
    struct stat st;
    while (::lstat(p.c_str(), &st) != 0) {
        const std::string parent = fsio::dirname(p);
        rest.push_back(fsio::basename(p));
        if (parent == p) return std::string();
        p = parent;
    }
    std::string r = fsio::real_path(p);
    if (r.empty()) return r;
    for (auto it = rest.rbegin(); it != rest.rend(); ++it) {
        if (*it == "." || it->empty()) continue;
        if (*it == "..") r = fsio::dirname(r);
        else r = r == "/" ? "/" + *it : r + "/" + *it;
    }
    return r;
}

// Refuses an output that gc would destroy: one inside the source or any other checkpoint
// directory (removed whole when that checkpoint goes), and one named step-N or like a partial
// directory in a way that does not match `step` (listed as another step's checkpoint with an
// index of the wrong step, or as an abandoned partial).
Status check_output(const std::string &ckpt_dir, const std::string &out, std::uint64_t step) {
    const std::string real = resolved_output(out);
    if (real.empty()) return make_error("output " + out + ": cannot resolve its parent directory");
    const std::string src = fsio::real_path(ckpt_dir);
    const std::string why = ": gc removes a checkpoint directory with everything in it; expected a "
                            "path outside every checkpoint directory";
    if (!src.empty() && (real == src || real.compare(0, src.size() + 1, src + "/") == 0))
        return make_error("output " + out + " lies inside the source checkpoint " + ckpt_dir + why);
    for (std::string a = fsio::dirname(real); a != "/" && a != "."; a = fsio::dirname(a)) {
        const std::string name = fsio::basename(a);
        if (parse_step_dir_name(name) || parse_partial_dir_name(name) || fsio::exists(fsio::join(a, kIndexFile)))
            return make_error("output " + out + " lies inside the checkpoint directory " + a + why);
    }
    const std::string name = fsio::basename(real);
    if (auto n = parse_step_dir_name(name); n && *n != step)
        return make_error("output " + out + " is named for step " + std::to_string(*n) + ", but " + ckpt_dir +
                          " holds step " + std::to_string(step) + ": expected " + step_dir_name(step) +
                          " or a name not of the form step-N (in a checkpoint root, step-N is step N)");
    if (parse_partial_dir_name(name))
        return make_error("output " + out + " is named like a partial checkpoint directory, which gc "
                          "removes; expected another name");
    return Status::success();
}

Result<std::string> rewrite(const std::string &ckpt_dir, const std::string &out,
                            std::uint32_t writers, const std::function<Layout(const Manifest &)> &plan,
                            const Progress &progress) {
    if (fsio::exists(out)) return make_error("output " + out + " already exists");
    auto reader = Reader::open(ckpt_dir);
    if (!reader) return make_error(reader.error());
    Reader &r = *reader.value();
    const Manifest &m = r.manifest();
    if (auto st = check_output(ckpt_dir, out, m.meta.step); !st) return make_error(st.error());
    const Layout layout = plan(m);

    const std::string parent = fsio::dirname(out);
    if (auto st = fsio::make_dirs(parent); !st) return make_error(st.error());
    const std::string attempt = "rw" + std::to_string(::getpid());
    const std::string partial = fsio::join(parent, "." + fsio::basename(out) + ".partial-" + attempt);
    if (auto st = fsio::remove_tree(partial); !st) return make_error(st.error());

    std::uint64_t total = 0, done = 0;
    for (const auto &w : layout)
        for (const auto &a : w) total += element_count(a.box.count) * dtype_size(a.tensor->dtype);

    auto fail = [&](const std::string &msg) -> Result<std::string> {
        (void)fsio::remove_tree(partial);   // ours alone; never leave half a rewrite behind
        return make_error(msg);
    };
    WriterOptions wo;
    wo.attempt = attempt;
    for (std::uint32_t w = 0; w < writers; ++w) {
        auto sw = open_shard_writer_in(partial, m.meta.step, w, wo);
        if (!sw) return fail(sw.error());
        for (const auto &a : layout[w]) {
            // Read and written a block at a time: memory does not grow with the slice.
            const std::size_t elem = dtype_size(a.tensor->dtype);
            auto st = add_tensor_from(*sw.value(), a.tensor->name, a.tensor->dtype, a.tensor->shape, a.box.offset,
                                      a.box.count, [&](const Box &b, char *dst) {
                                          const std::uint64_t n = element_count(b.count) * elem;
                                          Status read = r.read(a.tensor->name, moved_by(b, a.box.offset).offset,
                                                               b.count, dst, n);
                                          if (read) {
                                              done += n;
                                              if (progress) progress(done, total);
                                          }
                                          return read;
                                      });
            if (!st) return fail(st.error());
        }
        // Rank state is keyed by the rank that saved it, not by writer: writer 0 carries all.
        if (w == 0)
            for (const auto &info : m.rank_states) {
                auto rs = r.rank_state(info.rank);
                if (!rs) return fail(rs.error());
                if (auto st = sw.value()->add_rank_state(rs.value()); !st) return fail(st.error());
            }
        if (auto st = sw.value()->finish(); !st) return fail(st.error());
    }
    CommitRequest req;
    req.partial_dir = partial;
    req.final_dir = out;
    req.attempt = attempt;
    req.writers = writers;
    req.meta = m.meta;
    auto c = commit_partial(req);
    if (!c) return fail(c.error());
    return c;
}

}  // namespace

Result<std::string> merge(const std::string &ckpt_dir, const std::string &out, const Progress &progress) {
    auto m = read_index(ckpt_dir);
    if (!m) return make_error(m.error());
    const std::uint32_t writers = m.value().writers;
    return rewrite(ckpt_dir, out, writers,
                   [writers](const Manifest &man) {
                       // Same layout: each slice stays with the writer that owned it.
                       Layout l(writers);
                       for (const auto &t : man.tensors)
                           for (const auto &s : t.sources)
                               l[s.writer].push_back({&t, Box{s.offset, s.count}});
                       return l;
                   },
                   progress);
}

Result<std::string> reshard(const std::string &ckpt_dir, std::uint32_t writers, const std::string &out,
                            const Progress &progress) {
    if (writers == 0 || writers > kMaxWriters)
        return make_error("reshard: " + std::to_string(writers) + " writers: expected 1.." +
                          std::to_string(kMaxWriters));
    return rewrite(ckpt_dir, out, writers,
                   [writers](const Manifest &man) {
                       // Split dimension 0 into near-equal row ranges; writers beyond the row
                       // count of a small tensor get nothing of it.
                       Layout l(writers);
                       for (const auto &t : man.tensors) {
                           const std::uint64_t rows = t.shape[0];
                           const std::uint64_t base = rows / writers, extra = rows % writers;
                           std::uint64_t start = 0;
                           for (std::uint32_t w = 0; w < writers; ++w) {
                               const std::uint64_t n = base + (w < extra ? 1 : 0);
                               if (n == 0) continue;
                               Box b{Shape(t.shape.size(), 0), t.shape};
                               b.offset[0] = start;
                               b.count[0] = n;
                               l[w].push_back({&t, std::move(b)});
                               start += n;
                           }
                       }
                       return l;
                   },
                   progress);
}

}  // namespace ckpt
}  // namespace omni

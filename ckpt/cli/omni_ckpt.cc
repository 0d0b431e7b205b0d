// omni-ckpt: inspect, verify, merge, reshard and garbage-collect slurm-omni checkpoints.
//
// Exit status: 0 success, 1 failure (including a checkpoint that fails verify), 2 bad usage.
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "config.h"

#include "ckpt/format.h"
#include "ckpt/index.h"
#include "common/parse.h"
#include "omni/ckpt_cpp.h"
#include "progress.h"

namespace po = boost::program_options;
using nlohmann::json;
using namespace omni::ckpt;

namespace {

constexpr int kOk = 0, kFail = 1, kUsage = 2;

const char *kTopHelp =
    "Usage: omni-ckpt COMMAND [OPTIONS] ARGS\n"
    "       omni-ckpt --version\n"
    "Inspect and maintain slurm-omni HDF5 checkpoints (see omni-ckpt(1), omni-ckpt(5)).\n"
    "\n"
    "Commands:\n"
    "  ls DIR                     list the checkpoints under a checkpoint root\n"
    "  show CKPT                  metadata, tensors, shapes, dtypes and shard layout\n"
    "  verify CKPT                check every source file and checksum (exit 1 on a problem)\n"
    "  merge CKPT -o OUT          materialise an incremental chain into a self-contained copy\n"
    "  reshard CKPT --dp M -o OUT rewrite a checkpoint for M writers\n"
    "  gc DIR --keep K            remove incomplete checkpoints and unreferenced files\n"
    "\n"
    "Run 'omni-ckpt COMMAND --help' for a command's options.\n"
    "Exit status: 0 success, 1 failure, 2 bad usage.\n";

int usage_error(const std::string &cmd, const std::string &msg) {
    std::fprintf(stderr, "omni-ckpt%s%s: %s\nTry 'omni-ckpt %s--help'.\n", cmd.empty() ? "" : " ",
                 cmd.c_str(), msg.c_str(), cmd.empty() ? "" : (cmd + " ").c_str());
    return kUsage;
}

int failure(const std::string &cmd, const std::string &msg) {
    std::fprintf(stderr, "omni-ckpt %s: %s\n", cmd.c_str(), msg.c_str());
    return kFail;
}

// Parses a command's arguments; positional names are bound in order. Returns false and sets
// `err` on bad usage; sets `help` when --help was given.
bool parse(const std::string &cmd, const std::vector<std::string> &args, po::options_description &opts,
           const std::vector<std::string> &positional, po::variables_map &vm, std::string &err) {
    po::options_description hidden;
    po::positional_options_description pos;
    for (const auto &p : positional) {
        hidden.add_options()(p.c_str(), po::value<std::string>(), "");
        pos.add(p.c_str(), 1);
    }
    po::options_description all;
    all.add(opts).add(hidden);
    try {
        po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
        po::notify(vm);
    } catch (const po::error &e) {
        err = e.what();
        return false;
    }
    if (vm.count("help")) return true;
    for (const auto &p : positional)
        if (!vm.count(p)) {
            err = "missing " + p;
            return false;
        }
    (void)cmd;
    return true;
}

std::string str(const po::variables_map &vm, const char *key) {
    return vm.count(key) ? vm[key].as<std::string>() : std::string();
}

void print_help(const char *synopsis, const char *what, const po::options_description &opts) {
    std::cout << "Usage: omni-ckpt " << synopsis << "\n" << what << "\n\n" << opts
              << "\nExit status: 0 success, 1 failure, 2 bad usage.\n";
}

json entry_json(const CheckpointEntry &e) {
    return json{{"path", e.path},
                {"name", e.name},
                {"step", e.step},
                {"complete", e.complete},
                {"unreadable", e.unreadable},
                {"latest", e.latest},
                {"problem", e.problem},
                {"bytes", e.bytes},
                {"referenced_bytes", e.referenced_bytes},
                {"incremental", !e.bases.empty()},
                {"bases", e.bases},
                {"writers", e.writers},
                {"generation", e.generation},
                {"world_size", e.world_size},
                {"age_seconds", e.age_seconds}};
}

int cmd_ls(const std::vector<std::string> &args) {
    po::options_description opts("Options");
    opts.add_options()("help,h", "show this help")("json", "print a JSON array");
    po::variables_map vm;
    std::string err;
    if (!parse("ls", args, opts, {"DIR"}, vm, err)) return usage_error("ls", err);
    if (vm.count("help"))
        return print_help("ls [--json] DIR", "List the checkpoints under the checkpoint root DIR: step, "
                          "size, complete, unreadable (committed, but its index cannot be read now) "
                          "or incomplete, and the checkpoints an incremental one references.", opts), kOk;
    auto entries = list(str(vm, "DIR"));
    if (!entries) return failure("ls", entries.error());
    if (vm.count("json")) {
        json out = json::array();
        for (const auto &e : entries.value()) out.push_back(entry_json(e));
        std::cout << out.dump(2) << "\n";
        return kOk;
    }
    std::printf("%-34s %12s  %-11s %10s  %s\n", "CHECKPOINT", "STEP", "STATE", "SIZE", "REFERENCES");
    for (const auto &e : entries.value()) {
        std::string state = !e.complete ? "INCOMPLETE" : e.unreadable ? "UNREADABLE" : "complete";
        if (e.latest) state += "*";
        std::string refs;
        for (const auto &b : e.bases) refs += (refs.empty() ? "" : ",") + b;
        if (!e.bases.empty()) refs += " (" + human_bytes(e.referenced_bytes) + ")";
        if (!e.complete || e.unreadable) refs = e.problem;
        std::printf("%-34s %12llu  %-11s %10s  %s\n", e.name.c_str(),
                    static_cast<unsigned long long>(e.step), state.c_str(),
                    human_bytes(e.bytes).c_str(), refs.c_str());
    }
    return kOk;
}

int cmd_show(const std::vector<std::string> &args) {
    po::options_description opts("Options");
    opts.add_options()("help,h", "show this help")("json", "print the manifest as JSON");
    po::variables_map vm;
    std::string err;
    if (!parse("show", args, opts, {"CKPT"}, vm, err)) return usage_error("show", err);
    if (vm.count("help"))
        return print_help("show [--json] CKPT", "Show a checkpoint's metadata, tensors, shapes, "
                          "dtypes and shard layout.", opts), kOk;
    const std::string path = str(vm, "CKPT");
    // The index alone: show must work on a checkpoint whose shard files are missing, so the
    // user can see what it should contain.
    auto r = read_index(path);
    if (!r) return failure("show", r.error());
    const Manifest &m = r.value();
    if (vm.count("json")) {
        json j = json::parse(manifest_to_json(m));
        j["path"] = path;
        std::cout << j.dump(2) << "\n";
        return kOk;
    }
    std::uint64_t total = 0;
    for (const auto &t : m.tensors) total += element_count(t.shape) * dtype_size(t.dtype);
    std::printf("checkpoint   %s\nformat       %u\nstep         %llu\ngeneration   %llu\n"
                "world size   %llu\nwriters      %u\nunit layout  %s\n",
                path.c_str(), m.format_version, (unsigned long long)m.meta.step,
                (unsigned long long)m.meta.generation, (unsigned long long)m.meta.world_size,
                m.writers, m.meta.unit_layout.c_str());
    std::printf("lr schedule  %s base %g warmup %llu total %llu last %llu\n",
                m.meta.lr.kind.empty() ? "-" : m.meta.lr.kind.c_str(), m.meta.lr.base_lr,
                (unsigned long long)m.meta.lr.warmup_steps, (unsigned long long)m.meta.lr.total_steps,
                (unsigned long long)m.meta.lr.last_step);
    std::uint64_t consumed = 0;
    for (const auto &s : m.rank_states) consumed += s.consumed;
    std::printf("ledger       epoch %llu seed %llu; %zu rank states, %llu consumed indices\n",
                (unsigned long long)m.meta.ledger.epoch, (unsigned long long)m.meta.ledger.seed,
                m.rank_states.size(), (unsigned long long)consumed);
    std::printf("tensors      %zu, %s\n\n", m.tensors.size(), human_bytes(total).c_str());
    for (const auto &t : m.tensors) {
        std::printf("%s  %s %s\n", t.name.c_str(), dtype_name(t.dtype), shape_string(t.shape).c_str());
        for (const auto &s : t.sources)
            std::printf("    writer %-5u offset %-16s count %-16s %s\n", s.writer,
                        shape_string(s.offset).c_str(), shape_string(s.count).c_str(), s.file.c_str());
    }
    return kOk;
}

int cmd_verify(const std::vector<std::string> &args) {
    po::options_description opts("Options");
    opts.add_options()("help,h", "show this help")("json", "print a JSON report")(
        "quiet,q", "print nothing on success");
    po::variables_map vm;
    std::string err;
    if (!parse("verify", args, opts, {"CKPT"}, vm, err)) return usage_error("verify", err);
    if (vm.count("help"))
        return print_help("verify [--json] [--quiet] CKPT",
                          "Check that every source file of every tensor exists and that every "
                          "checksum matches; exit 1 naming each failing tensor and file.", opts), kOk;
    ProgressBar bar("verify", !vm.count("json"));
    auto rep = verify(str(vm, "CKPT"), bar.callback());
    bar.finish();
    if (!rep) {
        if (vm.count("json"))
            std::cout << json{{"path", str(vm, "CKPT")}, {"ok", false}, {"error", rep.error()}}.dump(2) << "\n";
        return failure("verify", rep.error());
    }
    const VerifyReport &v = rep.value();
    if (vm.count("json")) {
        json issues = json::array();
        for (const auto &i : v.issues) issues.push_back({{"tensor", i.tensor}, {"file", i.file}, {"problem", i.problem}});
        std::cout << json{{"path", v.path}, {"ok", v.ok()}, {"sources_checked", v.sources_checked},
                          {"bytes_checked", v.bytes_checked}, {"issues", issues}}.dump(2) << "\n";
    } else {
        for (const auto &i : v.issues)
            std::fprintf(stderr, "omni-ckpt verify: %s%s%s: %s\n",
                         i.tensor.empty() ? "" : ("tensor " + i.tensor).c_str(),
                         i.tensor.empty() ? "" : ": ", i.file.c_str(), i.problem.c_str());
        if (v.ok() && !vm.count("quiet"))
            std::printf("%s: OK, %llu sources, %s checked\n", v.path.c_str(),
                        (unsigned long long)v.sources_checked, human_bytes(v.bytes_checked).c_str());
        if (!v.ok())
            std::fprintf(stderr, "omni-ckpt verify: %s: %zu problem(s)\n", v.path.c_str(), v.issues.size());
    }
    return v.ok() ? kOk : kFail;
}

int cmd_merge(const std::vector<std::string> &args) {
    po::options_description opts("Options");
    opts.add_options()("help,h", "show this help")("output,o", po::value<std::string>(),
                                                   "path of the new checkpoint (must not exist)");
    po::variables_map vm;
    std::string err;
    if (!parse("merge", args, opts, {"CKPT"}, vm, err)) return usage_error("merge", err);
    if (vm.count("help"))
        return print_help("merge CKPT -o OUT", "Materialise CKPT and every checkpoint it references "
                          "into a self-contained checkpoint OUT with the same shard layout.", opts), kOk;
    if (!vm.count("output")) return usage_error("merge", "missing -o OUT");
    ProgressBar bar("merge", true);
    auto r = merge(str(vm, "CKPT"), str(vm, "output"), bar.callback());
    bar.finish();
    if (!r) return failure("merge", r.error());
    std::printf("%s\n", r.value().c_str());
    return kOk;
}

int cmd_reshard(const std::vector<std::string> &args) {
    po::options_description opts("Options");
    opts.add_options()("help,h", "show this help")("dp", po::value<std::string>(),
                                                   "number of writers M of the new checkpoint (1..1048576)")(
        "output,o", po::value<std::string>(), "path of the new checkpoint (must not exist)");
    po::variables_map vm;
    std::string err;
    if (!parse("reshard", args, opts, {"CKPT"}, vm, err)) return usage_error("reshard", err);
    if (vm.count("help"))
        return print_help("reshard CKPT --dp M -o OUT", "Rewrite CKPT for M writers: every tensor is "
                          "split along its first dimension into M near-equal slices.", opts), kOk;
    if (!vm.count("dp")) return usage_error("reshard", "missing --dp M");
    if (!vm.count("output")) return usage_error("reshard", "missing -o OUT");
    auto m = omni::parse_uint(str(vm, "dp"), 1, kMaxWriters, "--dp");
    if (!m) return usage_error("reshard", m.error());
    ProgressBar bar("reshard", true);
    auto r = reshard(str(vm, "CKPT"), static_cast<std::uint32_t>(m.value()), str(vm, "output"), bar.callback());
    bar.finish();
    if (!r) return failure("reshard", r.error());
    std::printf("%s\n", r.value().c_str());
    return kOk;
}

// gc kept everything but old partial directories because an index could not be read: that
// is a failure the operator has to act on (the retention policy was not applied), so exit 1.
int unreadable_failure(const GcReport &g) {
    if (g.unreadable.empty()) return kOk;
    for (const auto &u : g.unreadable) std::fprintf(stderr, "omni-ckpt gc: %s\n", u.c_str());
    return failure("gc", "kept every committed and retired checkpoint (it removed only partial directories past the grace time): it cannot tell which files " +
                             std::string(g.unreadable.size() == 1 ? "an unreadable checkpoint references"
                                                                  : "unreadable checkpoints reference") +
                             "; make the index readable (or move the directory out of the root) and "
                             "run gc again");
}

int cmd_gc(const std::vector<std::string> &args) {
    po::options_description opts("Options");
    opts.add_options()("help,h", "show this help")("keep", po::value<std::string>(),
                                                   "keep the K newest complete checkpoints (K >= 1)")(
        "every", po::value<std::string>(), "also keep every checkpoint whose step is a multiple of M")(
        "grace", po::value<std::string>(),
        "leave incomplete checkpoints younger than S seconds alone (default 300: they may be "
        "in flight)")("dry-run,n", "print what would be removed, remove nothing")("json", "print a JSON report");
    po::variables_map vm;
    std::string err;
    if (!parse("gc", args, opts, {"DIR"}, vm, err)) return usage_error("gc", err);
    if (vm.count("help"))
        return print_help("gc DIR --keep K [--every M] [--grace S] [--dry-run] [--json]",
                          "Remove incomplete checkpoints and every file that no kept checkpoint "
                          "references; a file that a kept checkpoint references is never removed. "
                          "While a checkpoint's index cannot be read, remove only partial "
                          "directories past the grace time and exit 1 naming it.",
                          opts), kOk;
    if (!vm.count("keep")) return usage_error("gc", "missing --keep K");
    GcPolicy p;
    auto k = omni::parse_uint(str(vm, "keep"), 1, UINT32_MAX, "--keep");
    if (!k) return usage_error("gc", k.error());
    p.keep_last = static_cast<std::uint32_t>(k.value());
    if (vm.count("every")) {
        auto e = omni::parse_uint(str(vm, "every"), 1, UINT64_MAX, "--every");
        if (!e) return usage_error("gc", e.error());
        p.keep_every = e.value();
    }
    if (vm.count("grace")) {
        auto g = omni::parse_uint(str(vm, "grace"), 0, UINT64_MAX, "--grace");
        if (!g) return usage_error("gc", g.error());
        p.grace_seconds = g.value();
    }
    p.dry_run = vm.count("dry-run") > 0;
    auto r = gc(str(vm, "DIR"), p);
    if (!r) return failure("gc", r.error());
    const GcReport &g = r.value();
    if (vm.count("json")) {
        std::cout << json{{"dry_run", p.dry_run},
                          {"kept", g.kept},
                          {"removed", g.removed},
                          {"removed_files", g.removed_files},
                          {"retained_for_references", g.retained_for_references},
                          {"skipped_in_flight", g.skipped},
                          {"unreadable", g.unreadable},
                          {"bytes_freed", g.bytes_freed}}.dump(2)
                  << "\n";
        return unreadable_failure(g);
    }
    const char *verb = p.dry_run ? "would remove" : "removed";
    for (const auto &n : g.removed) std::printf("%s %s\n", verb, n.c_str());
    for (const auto &n : g.removed_files) std::printf("%s %s\n", verb, n.c_str());
    for (const auto &n : g.retained_for_references)
        std::printf("kept files of %s that newer checkpoints reference\n", n.c_str());
    for (const auto &n : g.skipped)
        std::printf("skipped %s: incomplete but younger than --grace %llu s (may be in flight)\n",
                    n.c_str(), (unsigned long long)p.grace_seconds);
    std::printf("kept %zu checkpoint(s); %s %s\n", g.kept.size(), p.dry_run ? "would free" : "freed",
                human_bytes(g.bytes_freed).c_str());
    return unreadable_failure(g);
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) return usage_error("", "missing COMMAND");
    const std::string cmd = args[0];
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
        std::cout << kTopHelp;
        return kOk;
    }
    if (cmd == "--version") {
        std::printf("omni-ckpt (" PACKAGE_NAME ") " PACKAGE_VERSION ", checkpoint format version %u\n",
                    kFormatVersion);
        return kOk;
    }
    const std::map<std::string, int (*)(const std::vector<std::string> &)> cmds = {
        {"ls", cmd_ls},       {"show", cmd_show},       {"verify", cmd_verify},
        {"merge", cmd_merge}, {"reshard", cmd_reshard}, {"gc", cmd_gc}};
    auto it = cmds.find(cmd);
    if (it == cmds.end())
        return usage_error("", "unknown command '" + cmd.substr(0, 64) +
                                   "'; expected one of ls, show, verify, merge, reshard, gc");
    args.erase(args.begin());
    try {
        return it->second(args);
    } catch (const std::exception &e) {
        return failure(cmd, std::string("internal error: ") + e.what());
    }
}

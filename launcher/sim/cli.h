// omni-sim's command line, shared by its commands (sim/cmd_*.cc): errors and usage, the
// workload and LSSP options several commands take, list and number parsing, and the commands
// themselves, one file each.
#ifndef OMNI_LAUNCHER_SIM_CLI_H
#define OMNI_LAUNCHER_SIM_CLI_H

#include <boost/program_options.hpp>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "balance/lssp.h"
#include "common/parse.h"
#include "omni/result.h"
#include "workload/workload.h"

namespace omni::sim::cli {

namespace po = boost::program_options;
using omni::workload::Workload;

constexpr const char *kProg = "omni-sim";
constexpr std::uint64_t kMaxGpus = 1u << 16;
constexpr std::uint64_t kMaxSteps = 100000;

// "omni-sim: MSG" and "Try 'omni-sim --help'." on stderr; returns 2 (bad usage).
int usage_error(const std::string &msg);
// "omni-sim: MSG" on stderr; returns 1.
int fail(const std::string &msg);
// A comma-separated list of 1..64 integers in [min, max]; an error names `what`.
omni::Result<std::vector<std::uint64_t>> parse_list(const std::string &text, std::uint64_t min, std::uint64_t max,
                                                    const std::string &what);
// Parses argv for one command (adding --help to `desc`); returns an exit code when the
// command should end (help printed: 0, bad usage: 2), else nothing.
std::optional<int> parse(int argc, char **argv, po::options_description &desc, const std::string &usage,
                         po::variables_map &vm);
double mean(const std::vector<double> &v);
double median(std::vector<double> v);

// Integer options, read as text and parsed strictly (common/parse.h): each --NAME from `num`
// into *to, within [min, max]. The first bad one is the error, naming the option.
struct UintOption {
    const char *name;
    std::uint64_t *to, min, max;
};
omni::Status parse_uints(std::map<std::string, std::string> &num, std::initializer_list<UintOption> options);

// Options shared by the commands that simulate: the workload and what a cost counts.
struct WorkloadArgs {
    std::string workload = "paper", cost = "tokens";
    Workload w;
    omni::workload::CostKind kind = omni::workload::CostKind::Tokens;
    void add(po::options_description &d) {
        d.add_options()("workload", po::value<std::string>(&workload)->default_value(workload),
                        "FILE or preset (paper, text, uniform): omni-workload(5)")(
            "cost", po::value<std::string>(&cost)->default_value(cost),
            "what a sample costs: tokens, units or compute");
    }
    omni::Status load() {
        auto k = omni::workload::parse_cost_kind(cost);
        if (!k) return omni::make_error("--cost: " + k.error());
        kind = k.value();
        auto l = Workload::load(workload);
        if (!l) return omni::make_error("--workload " + workload + ": " + l.error());
        w = std::move(l).value();
        return omni::Status::success();
    }
};

// Options shared by the commands that run LSSP's planner: the memory limit, the degrees and
// the cost model (balance/lssp.h).
struct LsspArgs {
    std::string memory = "32768", degree = "8";
    double quadratic = 1e-5, comm = 0.1, latency = 50;
    omni::balance::LsspOptions options;
    void add(po::options_description &d) {
        d.add_options()("memory-tokens", po::value<std::string>(&memory)->default_value(memory),
                        "most tokens of one sample a replica may hold (activation memory)")(
            "max-degree", po::value<std::string>(&degree)->default_value(degree),
            "largest sequence-parallel degree, a power of two")(
            "quadratic", po::value<double>(&quadratic)->default_value(quadratic),
            "cost model: compute per token^2 (attention), per token's 1")(
            "sp-comm", po::value<double>(&comm)->default_value(comm),
            "cost model: a split sample's exchange per token and (k-1)/k")(
            "sp-latency", po::value<double>(&latency)->default_value(latency),
            "cost model: a split sample's fixed cost per replica");
    }
    omni::Status load() {
        auto m = omni::parse_uint(memory, 1, std::uint64_t(1) << 32, "--memory-tokens");
        if (!m) return omni::Error{m.error()};
        auto k = omni::parse_uint(degree, 1, 1024, "--max-degree");
        if (!k) return omni::Error{k.error()};
        if (k.value() & (k.value() - 1))
            return omni::make_error("--max-degree " + std::to_string(k.value()) + ": expected a power of two");
        for (auto [name, v] :
             {std::pair{"--quadratic", quadratic}, std::pair{"--sp-comm", comm}, std::pair{"--sp-latency", latency}})
            if (!(v >= 0 && v < 1e9)) return omni::make_error(std::string(name) + ": expected a number in [0, 1e9)");
        options.memory_tokens = m.value();
        options.max_degree = static_cast<std::uint32_t>(k.value());
        options.cost = {1, quadratic, comm, latency};
        return omni::Status::success();
    }
    // "memory T tokens, degrees up to K; time per sample: ..." for a table's heading.
    std::string describe() const {
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "memory %" PRIu64
                      " tokens, degrees up to %u; time per sample: L + %.6g L^2, split over k: / k + "
                      "%.6g L (k-1)/k + %.6g",
                      options.memory_tokens, options.max_degree, quadratic, comm, latency);
        return buf;
    }
};

// A comma-separated list, each item through `parse` (a Result-returning parser): the values
// and the items' texts. At least one item; an error names the option.
template <typename Parse>
auto parse_each(const std::string &text, const std::string &option, Parse parse) -> omni::Result<
    std::pair<std::vector<std::decay_t<decltype(parse(std::string()).value())>>, std::vector<std::string>>> {
    std::pair<std::vector<std::decay_t<decltype(parse(std::string()).value())>>, std::vector<std::string>> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        auto v = parse(item);
        if (!v) return omni::make_error(option + ": " + v.error());
        out.first.push_back(v.value());
        out.second.push_back(item);
    }
    if (out.first.empty()) return omni::make_error(option + ": expected at least one item");
    return out;
}

// The commands: argv[0] is the command's name; each returns the exit status.
int cmd_balance(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_lssp(int argc, char **argv);
int cmd_insertion(int argc, char **argv);
int cmd_system(int argc, char **argv);
int cmd_workload(int argc, char **argv);

}  // namespace omni::sim::cli

#endif

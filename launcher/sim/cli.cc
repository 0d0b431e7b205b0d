// omni-sim's shared command-line helpers; see sim/cli.h.
#include "sim/cli.h"

#include <algorithm>
#include <exception>
#include <iostream>

namespace omni::sim::cli {

int usage_error(const std::string &msg) {
    std::cerr << kProg << ": " << msg << "\nTry '" << kProg << " --help'.\n";
    return 2;
}

int fail(const std::string &msg) {
    std::cerr << kProg << ": " << msg << "\n";
    return 1;
}

// A comma-separated list of integers in [min, max].
omni::Result<std::vector<std::uint64_t>> parse_list(const std::string &text, std::uint64_t min, std::uint64_t max,
                                                    const std::string &what) {
    std::vector<std::uint64_t> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        auto v = omni::parse_uint(item, min, max, what);
        if (!v) return omni::Error{v.error()};
        out.push_back(v.value());
    }
    if (out.empty() || out.size() > 64)
        return omni::make_error(what + " '" + text + "': expected 1..64 comma-separated numbers");
    return out;
}

// Parses argv for one command; returns an exit code when the command should end (help, bad
// usage), else nothing.
std::optional<int> parse(int argc, char **argv, po::options_description &desc, const std::string &usage,
                         po::variables_map &vm) {
    desc.add_options()("help,h", "show this help and exit");
    try {
        po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
        po::notify(vm);
    } catch (const std::exception &e) {
        return usage_error(e.what());
    }
    if (vm.count("help")) {
        std::cout << usage << "\n" << desc << "\n";
        return 0;
    }
    return std::nullopt;
}

double mean(const std::vector<double> &v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

omni::Status parse_uints(std::map<std::string, std::string> &num, std::initializer_list<UintOption> options) {
    for (const UintOption &n : options) {
        auto v = omni::parse_uint(num[n.name], n.min, n.max, std::string("--") + n.name);
        if (!v) return omni::Error{v.error()};
        *n.to = v.value();
    }
    return omni::Status::success();
}

}  // namespace omni::sim::cli

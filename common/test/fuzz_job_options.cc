// libFuzzer target for the --omni-* option parser: the input is split into option values
// (by newline) and fed to every option in turn, then validated and turned into environment
// variables and back, as sbatch and slurmstepd would.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/job_options.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char *>(data), size);
    omni::SiteConfig site;
    site.allow_sm_slice = (size % 2) == 0;
    site.max_units = 64;
    omni::JobOptions o;
    const auto &names = omni::job_option_names();
    std::size_t i = 0, start = 0;
    for (std::size_t p = 0; p <= text.size() && i < names.size(); ++p) {
        if (p == text.size() || text[p] == '\n') {
            (void)omni::set_job_option(o, names[i++], text.substr(start, p - start), site);
            start = p + 1;
        }
    }
    if (omni::validate_job_options(o, site).ok()) {
        std::map<std::string, std::string> env;
        for (const auto &[k, v] : omni::job_option_env(o, site)) env[k] = v;
        auto back = omni::job_options_from_env(
            [&](const char *k) -> const char * {
                auto it = env.find(k);
                return it == env.end() ? nullptr : it->second.c_str();
            },
            site);
        if (!back.ok()) __builtin_trap();  // what we export must read back
    }
    return 0;
}

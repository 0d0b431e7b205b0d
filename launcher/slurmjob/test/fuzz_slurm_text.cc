// libFuzzer target for what the launcher parses of Slurm's commands' output: scontrol show
// job -d, squeue's pending jobs, sinfo's node names and scontrol show config. The first byte
// picks the parser, the rest is the text. Each must return a value or an error, never crash,
// and a job it accepts must be consistent (the per-node vectors as long as its node list).
#include <cstddef>
#include <cstdint>
#include <string>

#include "slurmjob/job.h"
#include "slurmjob/queue.h"

using namespace omni::launcher;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    if (size == 0) return 0;
    const std::string text(reinterpret_cast<const char *>(data) + 1, size - 1);
    switch (data[0] % 4) {
        case 0: {
            auto j = parse_scontrol_job(text, 2);
            if (j) {
                const auto &v = j.value();
                if (!v.cpus.empty() && (v.cpus.size() != v.nodes.size() || v.gpus.size() != v.nodes.size() ||
                                        v.mem_mb.size() != v.nodes.size()))
                    __builtin_trap();
            }
            break;
        }
        case 1: (void)parse_pending_jobs(text); break;
        case 2: {
            auto n = parse_node_names(text);
            if (n)
                for (const auto &name : n.value())
                    if (name.empty()) __builtin_trap();
            break;
        }
        default: (void)parse_config_value(text, "JobSubmitPlugins"); break;
    }
    return 0;
}

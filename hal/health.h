/* slurm-omni: node health findings of libomni-hal (omni-hal check).
 *
 * Each finding carries a stable code OMNI-HAL-NNN (listed in omni-hal(1); codes are never
 * reused for another meaning), a severity, the device it is about and a fix hint.
 */
#ifndef OMNI_HAL_HEALTH_H
#define OMNI_HAL_HEALTH_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hal/model.h"

namespace omni::hal {

struct CheckOptions {
    /* Read link widths/speeds, hugepages and isolated CPUs from a sysfs tree. On for the live
     * machine; for a topology file only when a tree is given (tests use a fake one). */
    bool read_sysfs = false;
    std::string sysfs_root;  // prefix of /sys ("" = the real one)
    /* Also compare PCIe link *speed* of GPUs: off by default because GPUs lower their link
     * speed when idle, which would report every idle node. Link width is always compared. */
    bool gpu_link_speed = false;
    std::optional<std::uint64_t> hugepages;  // pages the jobs need free
    std::uint64_t hugepage_kb = 2048;
    std::optional<std::vector<unsigned>> isolated_cpus;  // overrides sysfs
    DomainKind nic_domain = DomainKind::Numa;
    std::vector<std::string> expect_gpus;  // BDFs as the admin typed them
};

enum class Severity { Warning, Error };
const char *severity_name(Severity s);

struct Finding {
    std::string code;  // "OMNI-HAL-002"
    Severity severity = Severity::Error;
    std::string device;
    std::string message;
    std::string hint;
};

struct FindingCode {
    const char *code;
    Severity severity;
    const char *summary;
    const char *hint;
};
/* Every code a check can report, in code order. */
const std::vector<FindingCode> &finding_codes();

std::vector<Finding> run_checks(const Node &node, const CheckOptions &opts);

}  // namespace omni::hal

#endif

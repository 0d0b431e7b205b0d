// Live-machine queries that hwloc does not make: InfiniBand port state and rate (ibverbs),
// NVMe model, serial and SMART critical warning (sysfs, libnvme). Internal to libomni-hal.
#ifndef OMNI_HAL_DEVICE_QUERY_H
#define OMNI_HAL_DEVICE_QUERY_H

#include "hal/model.h"

namespace omni::hal {

/* Fills what can be read on this machine; what cannot (no permission, library not built in,
 * device gone) stays unknown and adds a warning to node.warnings. Never fails. */
void query_devices(Node &node);

}  // namespace omni::hal

#endif

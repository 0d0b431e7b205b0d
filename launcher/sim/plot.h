// omni-sim's PNG plots through gnuplot (the pngcairo terminal; Debian's gnuplot-nox, which
// scripts/install-deps installs, as the demo's loss plot uses it). gnuplot runs as a child
// process with the script on its standard input: no shell, no file but the PNG.
#ifndef OMNI_LAUNCHER_SIM_PLOT_H
#define OMNI_LAUNCHER_SIM_PLOT_H

#include <string>
#include <vector>

#include "omni/result.h"

namespace omni::sim {

struct Series {
    std::string title;
    std::vector<double> x, y;
};

// A line plot of `series` (points joined) into `png`; x on a log2 scale when `log2_x`.
// Errors: gnuplot missing or failing (its message), a PNG not written.
Status plot_lines(const std::string &png, const std::string &title, const std::string &xlabel,
                  const std::string &ylabel, const std::vector<Series> &series, bool log2_x);

struct Box {
    double x0, x1, y;  // from x0 to x1 on row y (height 0.8)
    unsigned rgb;      // 0xRRGGBB
};

// A Gantt chart: rows of boxes, with a legend of (title, rgb).
Status plot_boxes(const std::string &png, const std::string &title, const std::string &xlabel,
                  const std::string &ylabel, const std::vector<Box> &boxes,
                  const std::vector<std::pair<std::string, unsigned>> &legend);

// Runs gnuplot on `script` (tests and the two plots above). The PNG the script writes is
// checked: it must exist and start with the PNG signature.
Status run_gnuplot(const std::string &script, const std::string &png);

}  // namespace omni::sim

#endif

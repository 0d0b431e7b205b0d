// omni-sim's PNG plots; see sim/plot.h.
#include "sim/plot.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

extern char **environ;

namespace omni::sim {
namespace {

// gnuplot strings: single-quoted, a quote doubled.
std::string quote(const std::string &s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
}

std::string header(const std::string &png, const std::string &title, const std::string &xlabel,
                   const std::string &ylabel) {
    return "set terminal pngcairo size 1000,600 font ',11'\nset output " + quote(png) + "\nset title " + quote(title) +
           "\nset xlabel " + quote(xlabel) + "\nset ylabel " + quote(ylabel) + "\nset grid\nset key outside right\n";
}

std::string number(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return buf;
}

}  // namespace

Status run_gnuplot(const std::string &script, const std::string &png) {
    int in[2];
    if (pipe(in) != 0) return make_error(std::string("gnuplot: pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    char prog[] = "gnuplot";
    char *argv[] = {prog, nullptr};
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    if (rc != 0) {
        close(in[1]);
        return make_error(std::string("--plot needs gnuplot (Debian: gnuplot-nox): ") + std::strerror(rc));
    }
    // A gnuplot that dies early must not kill omni-sim with SIGPIPE.
    struct sigaction ignore {
    }, old{};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old);
    std::size_t off = 0;
    bool wrote = true;
    while (off < script.size()) {
        const ssize_t n = write(in[1], script.data() + off, script.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            wrote = false;
            break;
        }
        off += static_cast<std::size_t>(n);
    }
    close(in[1]);
    sigaction(SIGPIPE, &old, nullptr);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!wrote || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return make_error("gnuplot failed writing " + png + " (its messages are above)");
    std::ifstream f(png, std::ios::binary);
    char sig[8] = {};
    f.read(sig, sizeof sig);
    if (!f || std::memcmp(sig, "\x89PNG\r\n\x1a\n", 8) != 0) return make_error("gnuplot wrote no PNG to " + png);
    return Status::success();
}

Status plot_lines(const std::string &png, const std::string &title, const std::string &xlabel,
                  const std::string &ylabel, const std::vector<Series> &series, bool log2_x) {
    std::string s = header(png, title, xlabel, ylabel);
    if (log2_x) s += "set logscale x 2\n";
    s += "plot ";
    for (std::size_t i = 0; i < series.size(); ++i)
        s += (i ? ", " : "") + std::string("'-' using 1:2 with linespoints lw 2 pt 7 title ") + quote(series[i].title);
    s += "\n";
    for (const auto &se : series) {
        for (std::size_t k = 0; k < se.x.size() && k < se.y.size(); ++k)
            s += number(se.x[k]) + " " + number(se.y[k]) + "\n";
        s += "e\n";
    }
    return run_gnuplot(s, png);
}

Status plot_boxes(const std::string &png, const std::string &title, const std::string &xlabel,
                  const std::string &ylabel, const std::vector<Box> &boxes,
                  const std::vector<std::pair<std::string, unsigned>> &legend) {
    std::string s = header(png, title, xlabel, ylabel);
    s += "set style fill solid 0.9 border rgb 'black'\nset yrange [-0.6:*] reverse\nset ytics 1\nset grid noytics\n";
    s += "plot '-' using (($1+$2)/2):3:(($2-$1)/2):(0.4):4 with boxxyerror lc rgb variable notitle";
    for (const auto &[name, rgb] : legend)
        s += ", NaN with boxes lc rgb " +
             quote("#" +
                   [&] {
                       char b[8];
                       std::snprintf(b, sizeof b, "%06x", rgb & 0xffffff);
                       return std::string(b);
                   }()) +
             " title " + quote(name);
    s += "\n";
    for (const Box &b : boxes)
        s += number(b.x0) + " " + number(b.x1) + " " + number(b.y) + " " + std::to_string(b.rgb) + "\n";
    s += "e\n";
    return run_gnuplot(s, png);
}

}  // namespace omni::sim

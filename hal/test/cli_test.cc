// omni-hal as an admin runs it: exit codes 0/1/2, messages on stderr, JSON documents.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fixtures.h"

using nlohmann::json;
using namespace omni::hal::test;

namespace {

struct Run {
    int rc = -1;
    std::string out, err;
};

std::string slurp(const std::string &path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// Arguments are fixed strings from this file, so a shell command line is safe here.
Run omni_hal(const std::string &args) {
    const std::string err = "/tmp/omni-hal-cli-" + std::to_string(getpid()) + ".err";
    const std::string cmd = std::string(OMNI_HAL_BIN) + " " + args + " 2>" + err;
    Run r;
    FILE *p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.err = slurp(err);
    unlink(err.c_str());
    return r;
}

std::string topo(const char *name) { return "--topology " + fixture(name); }

}  // namespace

TEST(Cli, HelpForEveryCommand) {
    auto top = omni_hal("--help");
    EXPECT_EQ(top.rc, 0);
    for (const char *c : {"show", "matrix", "units", "gres-conf", "export", "merge", "validate",
                          "check", "codes"}) {
        EXPECT_NE(top.out.find(c), std::string::npos) << c;
        auto h = omni_hal(std::string(c) + " --help");
        EXPECT_EQ(h.rc, 0) << c;
        EXPECT_NE(h.out.find(std::string("Usage: omni-hal ") + c), std::string::npos) << c;
    }
}

TEST(Cli, UsageErrorsExitTwo) {
    EXPECT_EQ(omni_hal("").rc, 2);
    auto u = omni_hal("frobnicate");
    EXPECT_EQ(u.rc, 2);
    EXPECT_NE(u.err.find("unknown command 'frobnicate'"), std::string::npos);
    auto o = omni_hal("show --no-such-option");
    EXPECT_EQ(o.rc, 2);
    EXPECT_NE(o.err.find("no-such-option"), std::string::npos);
    auto k = omni_hal("units " + topo(kDgx2) + " --size 4 --domain socket");
    EXPECT_EQ(k.rc, 2);
    EXPECT_NE(k.err.find("--domain: 'socket': expected one of pcie|nvlink|numa|node"), std::string::npos);
    auto s = omni_hal("units " + topo(kDgx2) + " --size 0 --domain pcie");
    EXPECT_EQ(s.rc, 2);
    EXPECT_NE(s.err.find("--size"), std::string::npos);
    auto d = omni_hal("gres-conf " + topo(kDgx2) + " --device-prefix dev/nvidia");
    EXPECT_EQ(d.rc, 2);
    EXPECT_NE(d.err.find("expected an absolute path prefix"), std::string::npos);
    EXPECT_EQ(omni_hal("check " + topo(kDgx2) + " --hugepages many").rc, 2);
    EXPECT_EQ(omni_hal("check " + topo(kDgx2) + " --nic-domain rack").rc, 2);
    EXPECT_EQ(omni_hal("export " + topo(kDgx2)).rc, 2);  // -o missing
}

TEST(Cli, ShowJsonDgx2) {
    auto r = omni_hal("show --json " + topo(kDgx2));
    ASSERT_EQ(r.rc, 0) << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["schema"], "omni-hal/node");
    EXPECT_EQ(j["schema_version"], 1);
    EXPECT_EQ(j["gpus"].size(), 16u);
    EXPECT_EQ(j["domains"]["pcie"].size(), 4u);
    EXPECT_EQ(j["domains"]["pcie"][1]["gpus"], json({4, 5, 6, 7}));
    EXPECT_EQ(j["domains"]["nvlink"].size(), 1u);
    EXPECT_EQ(j["domains"]["nvlink"][0]["gpus"].size(), 16u);
    EXPECT_EQ(j["gpus"][0]["bdf"], "0000:34:00.0");
    EXPECT_EQ(j["gpus"][0]["nvlinks"]["1"], 6);
    EXPECT_EQ(j["gpu_paths"][0][1], "NV6");
    EXPECT_EQ(j["nvswitches"].size(), 12u);
}

// The matrix as nvidia-smi topo -m prints it, for the POWER8 fixture: its NVLinkBandwidth
// distances give 40000 MB/s between GPUs 0-1 and 2-3 (two 20 GB/s NVLink 1 links: NV2) and 0
// across the pairs, which sit on the two sockets (SYS); the affinities are the cpusets of
// NUMA nodes 0 (0x03030303) and 1 (0x00000303,0x03030000,,0x0) in the file.
TEST(Cli, MatrixPower8) {
    auto r = omni_hal("matrix " + topo(kPower8));
    ASSERT_EQ(r.rc, 0) << r.err;
    std::istringstream in(r.out);
    std::vector<std::vector<std::string>> rows;
    for (std::string line; std::getline(in, line) && !line.empty();) {
        std::istringstream w(line);
        rows.emplace_back();
        for (std::string f; w >> f;) rows.back().push_back(f);
    }
    const std::vector<std::vector<std::string>> want = {
        {"GPU0", "GPU1", "GPU2", "GPU3", "CPU", "Affinity", "NUMA", "Affinity"},
        {"GPU0", "X", "NV2", "SYS", "SYS", "0-1,8-9,16-17,24-25", "0"},
        {"GPU1", "NV2", "X", "SYS", "SYS", "0-1,8-9,16-17,24-25", "0"},
        {"GPU2", "SYS", "SYS", "X", "NV2", "80-81,88-89,96-97,104-105", "1"},
        {"GPU3", "SYS", "SYS", "NV2", "X", "80-81,88-89,96-97,104-105", "1"},
    };
    EXPECT_EQ(rows, want) << r.out;
    EXPECT_NE(r.out.find("NV#  = Connection traversing a bonded set of # NVLinks"), std::string::npos);
}

// The text of show for the fixture with an InfiniBand HCA: the NIC table (mlx5_0 is the RDMA
// device, its netdev ib0; the two 8086:1521 functions are eth0 and eth1) and the NUMA lines.
TEST(Cli, ShowTextNormalio) {
    auto r = omni_hal("show " + topo(kXeonIb));
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const char *line : {"numa 0    cpus 0-7,16-23", "numa 1    cpus 8-15,24-31",
                             "eth0        0000:81:00.0  1     no    eth0",
                             "eth1        0000:81:00.1  1     no    eth1",
                             "mlx5_0      0000:04:00.0  1     yes   ib0"})
        EXPECT_NE(r.out.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << r.out;
    EXPECT_NE(r.out.find("numa domains    {0} {1-3}\n"), std::string::npos) << r.out;
    // A node without GPUs has no domains to list, one line says so.
    auto vfs = omni_hal("show " + topo(kManyVfs));
    ASSERT_EQ(vfs.rc, 0) << vfs.err;
    EXPECT_NE(vfs.out.find("\n(no GPUs)\n"), std::string::npos) << vfs.out;
    EXPECT_NE(vfs.out.find("\ndomains         (no GPUs)\n"), std::string::npos) << vfs.out;
    EXPECT_EQ(vfs.out.find("numa domains"), std::string::npos) << vfs.out;
}

TEST(Cli, BadTopologyFiles) {
    auto m = omni_hal("show --topology /nonexistent/x.xml");
    EXPECT_EQ(m.rc, 1);
    EXPECT_NE(m.err.find("'/nonexistent/x.xml'"), std::string::npos);
    EXPECT_NE(m.err.find("expected an hwloc XML topology"), std::string::npos);
    // check: any error is 2, so that 1 always means findings.
    EXPECT_EQ(omni_hal("check --topology /nonexistent/x.xml").rc, 2);
    auto noio = omni_hal("show " + topo(kNoIo));
    EXPECT_EQ(noio.rc, 0);
    EXPECT_NE(noio.err.find("I/O discovery is missing"), std::string::npos);
    EXPECT_NE(noio.out.find("cpus      8"), std::string::npos);
}

TEST(Cli, CheckExitCodesAndJson) {
    auto healthy = omni_hal("check --json " + topo(kManyVfs));
    EXPECT_EQ(healthy.rc, 0) << healthy.err;
    json h = json::parse(healthy.out);
    EXPECT_EQ(h["schema"], "omni-hal/check");
    EXPECT_EQ(h["schema_version"], 1);
    EXPECT_EQ(h["healthy"], true);
    EXPECT_TRUE(h["findings"].empty());

    auto sick = omni_hal("check --json " + topo(kUnbalanced) +
                         " --expect-gpu 0000:3:00.0 --expect-gpu 0000:08:00.0");
    EXPECT_EQ(sick.rc, 1);
    json s = json::parse(sick.out);
    EXPECT_EQ(s["healthy"], false);
    ASSERT_EQ(s["findings"].size(), 2u);
    EXPECT_EQ(s["findings"][0]["code"], "OMNI-HAL-002");
    EXPECT_EQ(s["findings"][0]["severity"], "error");
    EXPECT_EQ(s["findings"][0]["device"], "mlx5_0 port 1");
    EXPECT_EQ(s["findings"][1]["code"], "OMNI-HAL-007");
    EXPECT_EQ(s["findings"][1]["device"], "0000:3:00.0");
    EXPECT_FALSE(s["findings"][1]["hint"].get<std::string>().empty());

    auto text = omni_hal("check " + topo(kDgx2) + " --isolated-cpus 0");
    EXPECT_EQ(text.rc, 1);
    EXPECT_NE(text.out.find("OMNI-HAL-005 warning gpu0 (0000:34:00.0): isolated CPUs 0 "),
              std::string::npos) << text.out;
}

TEST(Cli, CodesListsAllTen) {
    auto r = omni_hal("codes");
    EXPECT_EQ(r.rc, 0);
    for (int i = 1; i <= 10; ++i) {
        char code[32];
        std::snprintf(code, sizeof code, "OMNI-HAL-%03d", i);
        EXPECT_NE(r.out.find(code), std::string::npos) << code;
    }
}

// 32em64t: NVIDIA GPUs 03:00.0, 83:00.0, 84:00.0 are /dev/nvidia0..2, the AMD 84:00.1 is the
// first render node; package 0 has cores L#0-7, package 1 L#8-15; no NVLink, so no Links=.
TEST(Cli, GresConf) {
    auto r = omni_hal("gres-conf " + topo(kXeonIb) + " --device-prefix /tmp/fake/nvidia --node-name conan");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("NodeName=conan Name=gpu Type=tesla_m2075_dual-slot_computing_processor_module "
                         "File=/tmp/fake/nvidia0 Cores=0-7\n"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Type=tesla_k40m File=/tmp/fake/nvidia2 Cores=8-15\n"), std::string::npos);
    EXPECT_NE(r.out.find("Type=amd_radeon_r9_200_hd_7900_series File=/dev/dri/renderD128 Cores=8-15\n"),
              std::string::npos);
    // --mps: a share line per NVIDIA GPU (three here), none for the AMD one.
    auto m = omni_hal("gres-conf " + topo(kXeonIb) + " --device-prefix /tmp/fake/nvidia --node-name conan --mps");
    ASSERT_EQ(m.rc, 0) << m.err;
    EXPECT_NE(m.out.find("Gres=gpu:4,mps:300\nNodeName=conan Name=mps Count=100 File=/tmp/fake/nvidia0\n"
                         "NodeName=conan Name=mps Count=100 File=/tmp/fake/nvidia1\n"
                         "NodeName=conan Name=mps Count=100 File=/tmp/fake/nvidia2\n"),
              std::string::npos) << m.out;
    EXPECT_EQ(m.out.find("Name=mps Count=100 File=/dev/dri"), std::string::npos);
    EXPECT_EQ(r.out.find("Name=mps"), std::string::npos) << "only with --mps";
    // POWER8: links only between the NVLink pairs.
    auto p = omni_hal("gres-conf " + topo(kPower8));
    ASSERT_EQ(p.rc, 0);
    EXPECT_NE(p.out.find("File=/dev/nvidia0 Cores=0-3 Links=-1,2,0,0\n"), std::string::npos) << p.out;
    EXPECT_NE(p.out.find("File=/dev/nvidia3 Cores=4-7 Links=0,0,2,-1\n"), std::string::npos) << p.out;
    // synthetic-2core-2gpu: two A100 (nvml0, nvml1) joined by 300000 MB/s = 12 NVLink-3 links,
    // sized like the local test cluster's nodes (2 cores). slurmd -G accepts this output.
    auto a = omni_hal("gres-conf --topology " + fixture("synthetic-2core-2gpu.xml") +
                      " --device-prefix /tmp/omni/dev/nvidia");
    ASSERT_EQ(a.rc, 0) << a.err;
    EXPECT_NE(a.out.find("\nName=gpu Type=nvidia_a100-sxm4-40gb File=/tmp/omni/dev/nvidia0 Cores=0-1 "
                         "Links=-1,12\nName=gpu Type=nvidia_a100-sxm4-40gb File=/tmp/omni/dev/nvidia1 "
                         "Cores=0-1 Links=12,-1\n"),
              std::string::npos) << a.out;
}

TEST(Cli, ExportMergeValidate) {
    const std::string dir = "/tmp/omni-hal-cli-" + std::to_string(getpid());
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
    const std::string a = dir + "/a.json", b = dir + "/b.json", site = dir + "/site.json";
    ASSERT_EQ(omni_hal("export " + topo(kDgx2) + " --hostname dgx01 -o " + a).rc, 0);
    // The POWER8 file names its host (drac-12.grenoble.grid5000.fr): no --hostname needed.
    ASSERT_EQ(omni_hal("export " + topo(kPower8) + " -o " + b).rc, 0);
    auto m = omni_hal("merge -o " + site + " " + a + " " + b);
    ASSERT_EQ(m.rc, 0) << m.err;
    auto v = omni_hal("validate " + site);
    EXPECT_EQ(v.rc, 0);
    EXPECT_NE(v.out.find("valid, 2 node(s), 20 GPU(s)"), std::string::npos) << v.out;
    auto dup = omni_hal("export " + topo(kDgx2) + " --hostname dgx01 --merge " + site + " -o -");
    EXPECT_EQ(dup.rc, 1);
    EXPECT_NE(dup.err.find("host 'dgx01' is already in the site file"), std::string::npos) << dup.err;
    std::ofstream(dir + "/bad.json") << "{\"format\":\"omni-topology\",\"version\":9,\"nodes\":[]}";
    auto bad = omni_hal("validate " + dir + "/bad.json");
    EXPECT_EQ(bad.rc, 1);
    EXPECT_NE(bad.err.find("newer omni-hal"), std::string::npos);
    auto nohost = omni_hal("export " + topo(kDgx2) + " -o -");
    EXPECT_EQ(nohost.rc, 1);
    EXPECT_NE(nohost.err.find("give --hostname NAME"), std::string::npos);
    for (const auto &f : {a, b, site, dir + "/bad.json"}) unlink(f.c_str());
    rmdir(dir.c_str());
}

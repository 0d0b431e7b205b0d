// select/omni's C face (select_core.h), as the Slurm glue calls it: a site file of real
// machines written to disk, jobs' spank environments, and the choices it makes, with answers
// worked out by hand from the DGX-2 fixture.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "hal/test/fixtures.h"
#include "hal/topofile.h"
#include "select_core.h"

using namespace omni;

namespace {

class SelectCore : public ::testing::Test {
protected:
    void SetUp() override {
        char dir[] = "/tmp/omni-select-core-XXXXXX";
        ASSERT_NE(mkdtemp(dir), nullptr);
        dir_ = dir;
        hal::SiteTopology s;
        for (const char *h : {"dgx01", "dgx02"})
            s.nodes.push_back(hal::site_node(hal::test::load_fixture(hal::test::kDgx2), h));
        write(dir_ + "/site.json", hal::site_json(s));
    }
    void TearDown() override {
        for (const char *f : {"/site.json", "/bad.json"}) std::remove((dir_ + f).c_str());
        rmdir(dir_.c_str());
    }
    static void write(const std::string &path, const std::string &text) { std::ofstream(path) << text; }
    std::string dir_;
};

omni_select_job_t read_job(std::vector<std::string> vars, int want = OMNI_OK) {
    std::vector<char *> env;
    for (auto &v : vars) env.push_back(v.data());
    omni_select_job_t job{};
    EXPECT_EQ(omni_select_job_read(env.data(), static_cast<unsigned>(env.size()), &job), want)
        << omni_select_last_error();
    return job;
}

}  // namespace

TEST_F(SelectCore, LoadsTheSiteAndFindsItsNodes) {
    omni_select_site_t *site = nullptr;
    ASSERT_EQ(omni_select_site_load((dir_ + "/site.json").c_str(), &site), OMNI_OK) << omni_select_last_error();
    EXPECT_EQ(omni_select_site_nodes(site), 2u);
    unsigned gpus = 0;
    EXPECT_EQ(omni_select_site_find(site, "dgx02", &gpus), 1);
    EXPECT_EQ(gpus, 16u);
    EXPECT_EQ(omni_select_site_find(site, "dgx03", &gpus), -1);
    omni_select_site_free(site);
}

TEST_F(SelectCore, MissingAndBadFilesAreToldApart) {
    omni_select_site_t *site = nullptr;
    EXPECT_EQ(omni_select_site_load((dir_ + "/none.json").c_str(), &site), OMNI_ENOENT);
    EXPECT_EQ(site, nullptr);
    EXPECT_EQ(std::string(omni_select_last_error()), dir_ + "/none.json: no such file");
    write(dir_ + "/bad.json", "{\"format\": \"omni-topology\", \"version\": 7, \"nodes\": []}");
    EXPECT_EQ(omni_select_site_load((dir_ + "/bad.json").c_str(), &site), OMNI_EIO);
    EXPECT_NE(std::string(omni_select_last_error()).find(dir_ + "/bad.json"), std::string::npos)
        << omni_select_last_error();
    EXPECT_EQ(site, nullptr);
}

TEST_F(SelectCore, ReadsTheJobsUnitRequest) {
    auto job = read_job({"OMNI_ELASTIC_MIN=1", "OMNI_ELASTIC_MAX=4", "OMNI_UNIT_SIZE=4", "OMNI_UNIT_DOMAIN=pcie",
                         "OTHER=1"});
    EXPECT_EQ(job.ranks_per_unit, 4u);
    EXPECT_EQ(job.kind, 0);
    EXPECT_STREQ(job.kind_name, "pcie");
    EXPECT_EQ(job.min_units, 1u);
    EXPECT_EQ(job.max_units, 4u);
    // Not elastic: any number of units.
    job = read_job({"OMNI_UNIT_SIZE=2", "OMNI_UNIT_DOMAIN=numa"});
    EXPECT_EQ(job.kind, 2);
    EXPECT_EQ(job.min_units, 1u);
    EXPECT_EQ(job.max_units, UINT32_MAX);
    // Nothing to honour: no units, or units of a node (whole GPUs per node keep them).
    read_job({"OMNI_ELASTIC_MIN=1", "OMNI_ELASTIC_MAX=2"}, OMNI_ENOENT);
    read_job({"OMNI_UNIT_SIZE=2", "OMNI_UNIT_DOMAIN=node"}, OMNI_ENOENT);
    read_job({}, OMNI_ENOENT);
    // A variable that does not parse is named.
    read_job({"OMNI_UNIT_SIZE=2", "OMNI_UNIT_DOMAIN=rack"}, OMNI_EINVAL);
    EXPECT_NE(std::string(omni_select_last_error()).find("rack"), std::string::npos) << omni_select_last_error();
    read_job({"OMNI_UNIT_SIZE=two"}, OMNI_EINVAL);
    EXPECT_NE(std::string(omni_select_last_error()).find("omni-unit"), std::string::npos) << omni_select_last_error();
}

TEST_F(SelectCore, PlacesUnitsInsideSwitches) {
    omni_select_site_t *site = nullptr;
    ASSERT_EQ(omni_select_site_load((dir_ + "/site.json").c_str(), &site), OMNI_OK) << omni_select_last_error();
    const auto job = read_job({"OMNI_ELASTIC_MIN=1", "OMNI_ELASTIC_MAX=4", "OMNI_UNIT_SIZE=4", "OMNI_UNIT_DOMAIN=pcie"});
    // dgx01: GPUs 0, 4, 8 and 13 taken, one in each switch: no whole switch, no unit of 4.
    // dgx02: GPU 1 taken; switches {4-7}, {8-11}, {12-15} and socket {8-15} are whole.
    // {4-7} breaks only its switch (socket {0-7} is broken already); the other two break
    // their switch and socket {8-15}. One unit a node: dgx02's {4-7}.
    const uint64_t all = 0xffff;
    omni_select_node_t nodes[2] = {{0, all & ~0x2111ull, 0, 0}, {1, all & ~0x0002ull, 0, 0}};
    ASSERT_EQ(omni_select_place(site, &job, 1, 1, 2, nodes, 2), 1) << omni_select_last_error();
    EXPECT_EQ(nodes[0].gpus, 0u);
    EXPECT_EQ(nodes[1].gpus, 0x00f0u);
    // Two units a node on dgx02: {4-7}, then {8-11} or {12-15}, which break as much and fit
    // as tightly: the lower domain.
    ASSERT_EQ(omni_select_place(site, &job, 2, 1, 2, nodes, 2), 1);
    EXPECT_EQ(nodes[1].gpus, 0x0ff0u);
    // The job needs both nodes: not now.
    EXPECT_EQ(omni_select_place(site, &job, 1, 2, 2, nodes, 2), 0);
    // A site node the file does not have.
    omni_select_node_t stray{5, all, 0, 0};
    EXPECT_EQ(omni_select_place(site, &job, 1, 1, 1, &stray, 1), OMNI_EINVAL);
    EXPECT_EQ(std::string(omni_select_last_error()), "omni_select_place: node 0: site node 5 of 2");
    // 1 node of 1 unit cannot hold MIN 2 units: the clash is named.
    const auto two = read_job({"OMNI_ELASTIC_MIN=2", "OMNI_ELASTIC_MAX=2", "OMNI_UNIT_SIZE=4", "OMNI_UNIT_DOMAIN=pcie"});
    EXPECT_EQ(omni_select_place(site, &two, 1, 1, 1, nodes, 2), OMNI_EINVAL);
    EXPECT_EQ(std::string(omni_select_last_error()), "request: nodes 1..1 with 1 unit(s) per node cannot hold 2..2 units");
    omni_select_site_free(site);
}

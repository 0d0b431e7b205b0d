/*
 * select/omni: node selection for Slurm 22.05 and 24.11, with select/cons_tres doing the work.
 *
 * Every select_p_* entry point forwards to select/cons_tres, loaded through Slurm's own
 * plugin loader (plugin_context_create) into a table of its functions. The entry points, and
 * so the table, are those of the release configure found in the source tree
 * (OMNI_SELECT_API: 2205, 36 of them; 2411, 31: 23.02 dropped job_signal, jobinfo_sprint,
 * jobinfo_xstrdup and update_node_config, 23.11 resv_test and changed job_test's reservation
 * argument, 24.11 added its will_run argument). From 24.05 Slurm keeps its table private
 * (src/interfaces/select.c), so the table and its names are this file's. Linking against
 * select_cons_tres.so instead would bind its `plugin_id` to ours and make it act as
 * cons_res. cons_tres's init() runs a second time when this plugin loads it (slurmctld has
 * loaded every select plugin already); it is idempotent.
 *
 * A job whose spank environment asks for units inside pcie, nvlink or numa domains
 * (--omni-unit=N@KIND, recorded by spank/omni as OMNI_UNIT_*) is placed differently when
 * slurmctld starts it (SELECT_MODE_RUN_NOW): the placement core (select_core.h) chooses the
 * nodes whose free GPUs hold the job's units inside whole domains of the site topology file
 * (omni-topology.json beside slurm.conf), as many as the job's node range and MIN..MAX units
 * allow, best fit first; cons_tres then places the job on exactly those nodes, and the GPUs it
 * picked there are replaced by the core's (the same count, all free). Every other job, and
 * every test of when a job could start (TEST_ONLY, WILL_RUN), is cons_tres's alone. Where the
 * file is missing, unreadable, lacks a node or counts its GPUs differently from Slurm, the job
 * is placed as cons_tres places it, with a log line saying why.

 * A job expansion (--dependency=expand) goes through cons_tres too, with its merge of the
 * two jobs' cores repaired here (select_p_job_expand).
 *
 * Sites must install select_omni.so wherever Slurm runs (slurmctld, slurmd, and the hosts
 * of srun, squeue and sinfo): packed job and node data carry this plugin's id, and Slurm
 * unpacks them only where the plugin is present. Where slurmctld compares SelectType with
 * "cons_tres" by name (dynamic nodes, MaxNodeCount, an expansion helper's GRES options),
 * select/omni is not cons_tres; see select_omni(8).
 *
 * Runs inside slurmctld, slurmd, slurmstepd and the client commands: init() does nothing but
 * load cons_tres. The site file is read in slurmctld only, in node_init, which slurmctld calls
 * when it reads its configuration (at start and on `scontrol reconfigure`; not on the node and
 * partition updates that call reconfigure); job_test does no I/O, takes no
 * lock (slurmctld holds the job and node write locks around it) and allocates one entry per
 * candidate node.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>

#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"
#include "src/common/bitstring.h"
#include "src/common/list.h"
#include "src/common/log.h"
#include "src/common/node_conf.h"
#include "src/common/plugin.h"
#include "src/common/read_config.h"
#include "src/common/run_in_daemon.h"
#include "src/common/xmalloc.h"
#if OMNI_SELECT_API == 2205
#include "src/common/gres.h"
#include "src/common/select.h"
#elif OMNI_SELECT_API == 2411
#include "src/interfaces/gres.h"
#include "src/interfaces/select.h"
#else
#error "OMNI_SELECT_API must be 2205 or 2411 (configure sets it from the Slurm source tree)"
#endif
#include "src/slurmctld/slurmctld.h"

#include "select_core.h"

const char plugin_name[] = "slurm-omni: elastic units inside hardware domains (over cons_tres)";
const char plugin_type[] = "select/omni";
/* Unique among select plugins (101-110 are Slurm's); slurmdbd keeps it in 16 bits. */
const uint32_t plugin_id = 190;
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

#define PREFIX "select/omni: "

/* 22.05 names lists List and ListIterator, 24.11 list_t and list_itr_t; the structs are
 * the same in both. */
typedef struct xlist omni_list_t;
typedef struct listIterator omni_list_itr_t;

/* job_test's last arguments: cores reserved for others (22.05); what reservations exclude,
 * and the window of a will-run test (24.11). */
#if OMNI_SELECT_API == 2205
#define JOB_TEST_TAIL_PARAMS bitstr_t *exc_core_bitmap
#define JOB_TEST_TAIL_ARGS exc_core_bitmap
#else
#define JOB_TEST_TAIL_PARAMS resv_exc_t *resv_exc_ptr, will_run_data_t *will_run_ptr
#define JOB_TEST_TAIL_ARGS resv_exc_ptr, will_run_ptr
#endif

/* cons_tres's entry points, in the order of ct_syms below (plugin_context_create fills the
 * table by name). */
typedef struct {
	uint32_t *plugin_id;
	int (*state_save)(char *dir_name);
	int (*state_restore)(char *dir_name);
	int (*job_init)(omni_list_t *job_list);
	int (*node_init)(void);
	int (*job_test)(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes, uint32_t max_nodes,
			uint32_t req_nodes, uint16_t mode, omni_list_t *preemptee_candidates,
			omni_list_t **preemptee_job_list, JOB_TEST_TAIL_PARAMS);
	int (*job_begin)(job_record_t *job_ptr);
	int (*job_ready)(job_record_t *job_ptr);
	int (*job_expand)(job_record_t *from_job_ptr, job_record_t *to_job_ptr);
	int (*job_resized)(job_record_t *job_ptr, node_record_t *node_ptr);
#if OMNI_SELECT_API == 2205
	int (*job_signal)(job_record_t *job_ptr, int signal);
#endif
	int (*job_fini)(job_record_t *job_ptr);
	int (*job_suspend)(job_record_t *job_ptr, bool indf_susp);
	int (*job_resume)(job_record_t *job_ptr, bool indf_susp);
	bitstr_t *(*step_pick_nodes)(job_record_t *job_ptr, select_jobinfo_t *step_jobinfo,
				     uint32_t node_count, bitstr_t **avail_nodes);
	int (*step_start)(step_record_t *step_ptr);
	int (*step_finish)(step_record_t *step_ptr, bool killing_step);
	int (*nodeinfo_pack)(select_nodeinfo_t *nodeinfo, buf_t *buffer, uint16_t protocol_version);
	int (*nodeinfo_unpack)(select_nodeinfo_t **nodeinfo, buf_t *buffer, uint16_t protocol_version);
	select_nodeinfo_t *(*nodeinfo_alloc)(void);
	int (*nodeinfo_free)(select_nodeinfo_t *nodeinfo);
	int (*nodeinfo_set_all)(void);
	int (*nodeinfo_set)(job_record_t *job_ptr);
	int (*nodeinfo_get)(select_nodeinfo_t *nodeinfo, enum select_nodedata_type dinfo,
			    enum node_states state, void *data);
	select_jobinfo_t *(*jobinfo_alloc)(void);
	int (*jobinfo_free)(select_jobinfo_t *jobinfo);
	int (*jobinfo_set)(select_jobinfo_t *jobinfo, enum select_jobdata_type data_type, void *data);
	int (*jobinfo_get)(select_jobinfo_t *jobinfo, enum select_jobdata_type data_type, void *data);
	select_jobinfo_t *(*jobinfo_copy)(select_jobinfo_t *jobinfo);
	int (*jobinfo_pack)(select_jobinfo_t *jobinfo, buf_t *buffer, uint16_t protocol_version);
	int (*jobinfo_unpack)(select_jobinfo_t **jobinfo, buf_t *buffer, uint16_t protocol_version);
#if OMNI_SELECT_API == 2205
	char *(*jobinfo_sprint)(select_jobinfo_t *jobinfo, char *buf, size_t size, int mode);
	char *(*jobinfo_xstrdup)(select_jobinfo_t *jobinfo, int mode);
#endif
	int (*get_info_from_plugin)(enum select_plugindata_info dinfo, job_record_t *job_ptr, void *data);
#if OMNI_SELECT_API == 2205
	int (*update_node_config)(int index);
#endif
	int (*reconfigure)(void);
#if OMNI_SELECT_API == 2205
	bitstr_t *(*resv_test)(resv_desc_msg_t *resv_desc_ptr, uint32_t node_cnt, bitstr_t *avail_bitmap,
			       bitstr_t **core_bitmap);
#endif
} ct_ops_t;

/* The release's entry points, as select_omni-RELEASE.map exports them (configure checked
 * that list against the source tree's select.c). */
static const char *ct_syms[] = {
	"plugin_id",
	"select_p_state_save",
	"select_p_state_restore",
	"select_p_job_init",
	"select_p_node_init",
	"select_p_job_test",
	"select_p_job_begin",
	"select_p_job_ready",
	"select_p_job_expand",
	"select_p_job_resized",
#if OMNI_SELECT_API == 2205
	"select_p_job_signal",
#endif
	"select_p_job_fini",
	"select_p_job_suspend",
	"select_p_job_resume",
	"select_p_step_pick_nodes",
	"select_p_step_start",
	"select_p_step_finish",
	"select_p_select_nodeinfo_pack",
	"select_p_select_nodeinfo_unpack",
	"select_p_select_nodeinfo_alloc",
	"select_p_select_nodeinfo_free",
	"select_p_select_nodeinfo_set_all",
	"select_p_select_nodeinfo_set",
	"select_p_select_nodeinfo_get",
	"select_p_select_jobinfo_alloc",
	"select_p_select_jobinfo_free",
	"select_p_select_jobinfo_set",
	"select_p_select_jobinfo_get",
	"select_p_select_jobinfo_copy",
	"select_p_select_jobinfo_pack",
	"select_p_select_jobinfo_unpack",
#if OMNI_SELECT_API == 2205
	"select_p_select_jobinfo_sprint",
	"select_p_select_jobinfo_xstrdup",
#endif
	"select_p_get_info_from_plugin",
#if OMNI_SELECT_API == 2205
	"select_p_update_node_config",
#endif
	"select_p_reconfigure",
#if OMNI_SELECT_API == 2205
	"select_p_resv_test",
#endif
};
_Static_assert(sizeof(ct_syms) / sizeof(ct_syms[0]) == sizeof(ct_ops_t) / sizeof(void *),
	       "one name for each entry of ct_ops_t");

/* The site topology file, beside slurm.conf (get_extra_conf_path). */
#define SITE_FILE "omni-topology.json"
/* Stale nodes named at load; the rest are counted. */
#define STALE_NAMED 8

static ct_ops_t ct;
static plugin_context_t *ct_context = NULL;
/* slurmctld only: the site's layouts (NULL: place every job as cons_tres does), read with
 * slurmctld's configuration, which holds every lock job_test could race with. */
static omni_select_site_t *site = NULL;
/* gres/gpu's and gres/mps's plugin ids, worked out once with the site (not per job test). */
static uint32_t gpu_plugin, mps_plugin;

extern int init(void)
{
	if (ct_context)
		return SLURM_SUCCESS;
	ct_context = plugin_context_create("select", "select/cons_tres", (void **) &ct,
					   ct_syms, sizeof(ct_syms));
	if (!ct_context) {
		error(PREFIX "cannot load select/cons_tres, which select/omni forwards to");
		return SLURM_ERROR;
	}
	debug(PREFIX "forwarding to select/cons_tres (plugin id %u)", *ct.plugin_id);
	return SLURM_SUCCESS;
}

extern int fini(void)
{
	int rc = SLURM_SUCCESS;

	if (ct_context)
		rc = plugin_context_destroy(ct_context);
	ct_context = NULL;
	omni_select_site_free(site);
	site = NULL;
	return rc;
}

extern int select_p_state_save(char *dir_name)
{
	return (*(ct.state_save))(dir_name);
}

extern int select_p_state_restore(char *dir_name)
{
	return (*(ct.state_restore))(dir_name);
}

extern int select_p_job_init(omni_list_t *job_list)
{
	return (*(ct.job_init))(job_list);
}

/* The gres/NAME state of a node (NULL: it has none). */
static gres_node_state_t *_node_gres(node_record_t *node_ptr, uint32_t id)
{
	gres_state_t *gs;

	if (!node_ptr->gres_list)
		return NULL;
	gs = list_find_first(node_ptr->gres_list, gres_find_id, &id);
	return gs ? gs->gres_data : NULL;
}

/* The node's GPUs as Slurm counts them. */
static unsigned _node_gpu_count(node_record_t *node_ptr, uint32_t gpu_id)
{
	gres_node_state_t *ns = _node_gres(node_ptr, gpu_id);

	return ns ? (unsigned) ns->gres_cnt_avail : 0;
}

/* Nodes with GPUs whose count the site file does not match: said once per load. */
static void _check_site_nodes(const char *path)
{
	node_record_t *node_ptr;
	int stale = 0;

	for (int i = 0; (node_ptr = next_node(&i)); i++) {
		unsigned have = _node_gpu_count(node_ptr, gpu_plugin), file_gpus = 0;

		if (!have)
			continue;
		if (omni_select_site_find(site, node_ptr->name, &file_gpus) >= 0 && file_gpus == have)
			continue;
		if (stale++ >= STALE_NAMED)
			continue;
		if (file_gpus)
			info(PREFIX "node %s: %u GPU(s) in Slurm, %u in %s: units that could use it are placed as by cons_tres",
			     node_ptr->name, have, file_gpus, path);
		else
			info(PREFIX "node %s: %u GPU(s) in Slurm, not listed in %s: units that could use it are placed as by cons_tres",
			     node_ptr->name, have, path);
	}
	if (stale > STALE_NAMED)
		info(PREFIX "%d more such node(s)", stale - STALE_NAMED);
}

/* Reads the site file; on any failure, places every job as cons_tres does until the next
 * `scontrol reconfigure`. */
static void _load_site(void)
{
	char *path = get_extra_conf_path(SITE_FILE);
	omni_select_site_t *fresh = NULL;
	int rc = omni_select_site_load(path, &fresh);

	omni_select_site_free(site);
	site = fresh;
	gpu_plugin = gres_build_id("gpu");
	mps_plugin = gres_build_id("mps");
	if (rc == OMNI_OK) {
		info(PREFIX "domain layouts of %zu node(s) from %s", omni_select_site_nodes(site), path);
		_check_site_nodes(path);
	} else if (rc == OMNI_ENOENT) {
		info(PREFIX "no %s: units are placed as select/cons_tres places any job", path);
	} else {
		error(PREFIX "%s: units are placed as select/cons_tres places any job until it is fixed and slurmctld reconfigured",
		      omni_select_last_error());
	}
	xfree(path);
}

extern int select_p_node_init(void)
{
	int rc = (*(ct.node_init))();

	if (running_in_slurmctld())
		_load_site();
	return rc;
}

/* The job's one GPU request, when it is G GPUs on every node of any type; else NULL and
 * *why says what it is instead. */
static gres_job_state_t *_job_gpus(job_record_t *job_ptr, uint32_t gpu_id, const char **why)
{
	gres_job_state_t *found = NULL;
	gres_state_t *gs;
	omni_list_itr_t *it;

	*why = "asks for no GPUs";
	if (!job_ptr->gres_list_req)
		return NULL;
	it = list_iterator_create(job_ptr->gres_list_req);
	while ((gs = list_next(it))) {
		gres_job_state_t *js = gs->gres_data;

		if (gs->plugin_id != gpu_id)
			continue;
		if (found) {
			*why = "asks for GPUs of several types";
			found = NULL;
			break;
		}
		found = js;
		if (js->type_name) {
			*why = "asks for GPUs of a type";
			found = NULL;
			break;
		}
		if (!js->gres_per_node) {
			*why = "asks for GPUs per job, socket or task, not per node";
			found = NULL;
			break;
		}
	}
	list_iterator_destroy(it);
	return found;
}

/* Bit g set: GPU g of the node is used by no job, whole (gres/gpu) or shared (gres/mps). */
static uint64_t _free_gpus(node_record_t *node_ptr, unsigned gpus, uint32_t gpu_id, uint32_t mps_id)
{
	uint64_t free_gpus = gpus >= 64 ? ~(uint64_t) 0 : (((uint64_t) 1) << gpus) - 1;
	uint32_t ids[2] = { gpu_id, mps_id };

	for (int k = 0; k < 2; k++) {
		gres_node_state_t *ns = _node_gres(node_ptr, ids[k]);

		if (!ns || !ns->gres_bit_alloc)
			continue;
		for (unsigned g = 0; g < gpus && g < (unsigned) bit_size(ns->gres_bit_alloc); g++)
			if (bit_test(ns->gres_bit_alloc, g))
				free_gpus &= ~(((uint64_t) 1) << g);
	}
	return free_gpus;
}

/* After cons_tres chose `bitmap`'s nodes: each one's GPUs become the core's choice, which has
 * the same count and is free. */
static void _set_gpus(job_record_t *job_ptr, gres_job_state_t *js, bitstr_t *bitmap,
		      const omni_select_node_t *cand, const int *cand_inx, int ncand)
{
	for (int c = 0; c < ncand; c++) {
		int i = cand_inx[c];
		bitstr_t *sel;

		if (!bit_test(bitmap, i))
			continue;
		sel = (js->gres_bit_select && (uint32_t) i < js->total_node_cnt) ? js->gres_bit_select[i] : NULL;
		if (!sel || bit_set_count(sel) != __builtin_popcountll(cand[c].gpus) ||
		    bit_size(sel) < 64 - __builtin_clzll(cand[c].gpus)) {
			error(PREFIX "%pJ: node %s: cons_tres's GPU choice is not %d GPU(s); left as it is",
			      job_ptr, node_record_table_ptr[i]->name, __builtin_popcountll(cand[c].gpus));
			continue;
		}
		bit_clear_all(sel);
		for (int g = 0; g < 64; g++)
			if (cand[c].gpus >> g & 1)
				bit_set(sel, g);
	}
}

/*
 * A job with units inside domains, being started: the core picks the nodes (and their GPUs)
 * among `bitmap`'s, cons_tres places the job on them. Returns cons_tres's answer, or
 * SLURM_ERROR when fewer nodes than the job needs hold its units now; *forward is set when
 * the job is cons_tres's alone after all (the reason logged).
 */
static int _job_test_units(job_record_t *job_ptr, const omni_select_job_t *job, bitstr_t *bitmap,
			   uint32_t min_nodes, uint32_t max_nodes, uint32_t req_nodes, uint16_t mode,
			   omni_list_t *preemptee_candidates, omni_list_t **preemptee_job_list,
			   JOB_TEST_TAIL_PARAMS, bool *forward)
{
	bitstr_t *required = job_ptr->details ? job_ptr->details->req_node_bitmap : NULL;
	const char *why = NULL;
	gres_job_state_t *js = _job_gpus(job_ptr, gpu_plugin, &why);
	omni_select_node_t *cand = NULL;
	int *cand_inx = NULL, ncand = 0, chosen, rc;
	unsigned per_node, units_per_node;
	bitstr_t *orig;

	*forward = true;
	if (!js) {
		debug(PREFIX "%pJ: its units are not placed by domain: it %s", job_ptr, why);
		return SLURM_ERROR;
	}
	if (job_ptr->bit_flags & GRES_ENFORCE_BIND) {
		debug(PREFIX "%pJ: its units are not placed by domain: --gres-flags=enforce-binding leaves GPUs to cons_tres",
		      job_ptr);
		return SLURM_ERROR;
	}
	per_node = (unsigned) js->gres_per_node;
	if (per_node % job->ranks_per_unit) {
		debug(PREFIX "%pJ: its units are not placed by domain: %u GPU(s) a node is not whole units of %u",
		      job_ptr, per_node, job->ranks_per_unit);
		return SLURM_ERROR;
	}
	units_per_node = per_node / job->ranks_per_unit;

	cand = xcalloc(bit_set_count(bitmap) + 1, sizeof(*cand));
	cand_inx = xcalloc(bit_set_count(bitmap) + 1, sizeof(*cand_inx));
	for (int i = 0; i < node_record_count; i++) {
		node_record_t *node_ptr = node_record_table_ptr[i];
		unsigned have, file_gpus = 0;
		long at;

		if (!node_ptr || !bit_test(bitmap, i))
			continue;
		have = _node_gpu_count(node_ptr, gpu_plugin);
		if (have < per_node)
			continue; /* cons_tres would not choose it either */
		at = omni_select_site_find(site, node_ptr->name, &file_gpus);
		if (at < 0 || file_gpus != have) {
			debug(PREFIX "%pJ: its units are not placed by domain: node %s is %s the site topology file",
			      job_ptr, node_ptr->name, at < 0 ? "not in" : "stale in");
			goto out;
		}
		cand[ncand].site_node = at;
		cand[ncand].free_gpus = _free_gpus(node_ptr, have, gpu_plugin, mps_plugin);
		cand[ncand].required = required && bit_test(required, i);
		cand_inx[ncand++] = i;
	}
	chosen = omni_select_place(site, job, units_per_node, min_nodes, MIN(req_nodes, max_nodes), cand, ncand);
	if (chosen < 0) {
		debug(PREFIX "%pJ: its units are not placed by domain: %s", job_ptr, omni_select_last_error());
		goto out;
	}
	*forward = false;
	if (chosen == 0) {
		debug(PREFIX "%pJ: too few nodes hold %u unit(s) of %u GPU(s) inside one %s domain now",
		      job_ptr, units_per_node, job->ranks_per_unit, job->kind_name);
		rc = SLURM_ERROR;
		goto out;
	}
	orig = bit_copy(bitmap);
	bit_clear_all(bitmap);
	for (int c = 0; c < ncand; c++)
		if (cand[c].gpus)
			bit_set(bitmap, cand_inx[c]);
	rc = (*(ct.job_test))(job_ptr, bitmap, min_nodes, MIN(req_nodes, (uint32_t) chosen),
			      MIN(max_nodes, (uint32_t) chosen), mode, preemptee_candidates, preemptee_job_list,
			      JOB_TEST_TAIL_ARGS);
	if (rc == SLURM_SUCCESS) {
		_set_gpus(job_ptr, js, bitmap, cand, cand_inx, ncand);
		debug(PREFIX "%pJ: %u unit(s) of %u GPU(s) a node inside %s domains, on %d node(s)", job_ptr,
		      units_per_node, job->ranks_per_unit, job->kind_name, bit_set_count(bitmap));
	} else {
		bit_copybits(bitmap, orig);
	}
	FREE_NULL_BITMAP(orig);
out:
	xfree(cand);
	xfree(cand_inx);
	return *forward ? SLURM_ERROR : rc;
}

extern int select_p_job_test(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes, uint32_t max_nodes,
			     uint32_t req_nodes, uint16_t mode, omni_list_t *preemptee_candidates,
			     omni_list_t **preemptee_job_list, JOB_TEST_TAIL_PARAMS)
{
	omni_select_job_t job;
	int rc;

	if (site && SELECT_IS_MODE_RUN_NOW(mode) && job_ptr->spank_job_env_size) {
		rc = omni_select_job_read(job_ptr->spank_job_env, job_ptr->spank_job_env_size, &job);
		if (rc == OMNI_OK) {
			bool forward;

			rc = _job_test_units(job_ptr, &job, bitmap, min_nodes, max_nodes, req_nodes, mode,
					     preemptee_candidates, preemptee_job_list, JOB_TEST_TAIL_ARGS, &forward);
			if (!forward)
				return rc;
		} else if (rc != OMNI_ENOENT) {
			debug(PREFIX "%pJ: its units are not placed by domain: %s", job_ptr, omni_select_last_error());
		}
	}
	return (*(ct.job_test))(job_ptr, bitmap, min_nodes, max_nodes, req_nodes, mode, preemptee_candidates,
				preemptee_job_list, JOB_TEST_TAIL_ARGS);
}

extern int select_p_job_begin(job_record_t *job_ptr)
{
	return (*(ct.job_begin))(job_ptr);
}

extern int select_p_job_ready(job_record_t *job_ptr)
{
	return (*(ct.job_ready))(job_ptr);
}

/* One node's cores in a job, by the node's index in Slurm's node table. */
typedef struct {
	int node_inx;
	bitstr_t *cores;
} node_cores_t;

/* The job's cores, node by node (NULL with *count 0 when it has none recorded). */
static node_cores_t *_cores_by_node(job_resources_t *jr, int *count)
{
	node_cores_t *out;
	int i, n = 0, last;

	*count = 0;
	if (!jr || !jr->node_bitmap || !jr->core_bitmap || !jr->nhosts)
		return NULL;
	out = xcalloc(jr->nhosts, sizeof(*out));
	last = bit_fls(jr->node_bitmap);
	for (i = bit_ffs(jr->node_bitmap); i >= 0 && i <= last && (uint32_t) n < jr->nhosts; i++) {
		if (!bit_test(jr->node_bitmap, i))
			continue;
		out[n].node_inx = i;
		out[n].cores = copy_job_resources_node(jr, n);
		n++;
	}
	*count = n;
	return out;
}

static void _free_cores(node_cores_t *nc, int count)
{
	int k;

	for (k = 0; k < count; k++)
		FREE_NULL_BITMAP(nc[k].cores);
	xfree(nc);
}

/* ORs the cores of `nc` that sit on node `node_inx` into the merged job's node `n`. */
static void _put_cores(job_resources_t *jr, int n, int node_inx, const node_cores_t *nc, int count)
{
	int k, c, first = get_job_resources_offset(jr, n, 0, 0), size;

	if (first < 0)
		return;
	for (k = 0; k < count; k++) {
		if (nc[k].node_inx != node_inx || !nc[k].cores)
			continue;
		size = bit_size(nc[k].cores);
		if (first + size > bit_size(jr->core_bitmap))
			continue;
		for (c = 0; c < size; c++)
			if (bit_test(nc[k].cores, c))
				bit_set(jr->core_bitmap, first + c);
	}
}

/*
 * Slurm's expansion (--dependency=expand, then NumNodes=0 on the helper) moves the helper
 * job's nodes into the job in cons_tres's job_expand, whose core merge
 * (job_resources_bits_copy, 22.05 and later) ORs the two jobs' core bitmaps whole. Those
 * bitmaps are per job, node after node, so the helper's cores land on the job's first nodes
 * and the nodes it brings hold none: steps there fail in task/affinity ("task_g_set_affinity:
 * Invalid argument") and cons_tres counts those cores free for other jobs. select/omni keeps
 * both jobs' cores per node before the merge and rebuilds the merged job's cores from them
 * after it; cons_tres's partition rows are then rebuilt from the job's right cores through
 * its own indefinite suspend and resume of the cores (the job's memory and GRES untouched).
 * Only the core bits change: cons_tres's CPU counts per node are right already.
 *
 * cons_tres also refuses to expand a job whose gres_list_req exists, and slurmctld gives
 * every whole-node job (--exclusive) one where slurm.conf has GresTypes
 * (gres_ctld_job_select_whole_node), empty when its nodes hold no GRES. An empty list has
 * nothing to merge: it is hidden from cons_tres for the call.
 */
extern int select_p_job_expand(job_record_t *from_job_ptr, job_record_t *to_job_ptr)
{
	node_cores_t *from_cores, *to_cores;
	omni_list_t *from_gres, *to_gres;
	job_resources_t *jr;
	int from_cnt, to_cnt, i, n = 0, last, rc;

	from_cores = _cores_by_node(from_job_ptr->job_resrcs, &from_cnt);
	to_cores = _cores_by_node(to_job_ptr->job_resrcs, &to_cnt);
	from_gres = from_job_ptr->gres_list_req;
	to_gres = to_job_ptr->gres_list_req;
	if (from_gres && !list_count(from_gres))
		from_job_ptr->gres_list_req = NULL;
	if (to_gres && !list_count(to_gres))
		to_job_ptr->gres_list_req = NULL;
	rc = (*(ct.job_expand))(from_job_ptr, to_job_ptr);
	from_job_ptr->gres_list_req = from_gres;
	to_job_ptr->gres_list_req = to_gres;
	jr = to_job_ptr->job_resrcs;
	if (rc == SLURM_SUCCESS && jr && jr->core_bitmap && jr->node_bitmap && (from_cnt || to_cnt)) {
		(void) (*(ct.job_suspend))(to_job_ptr, true);
		bit_clear_all(jr->core_bitmap);
		last = bit_fls(jr->node_bitmap);
		for (i = bit_ffs(jr->node_bitmap); i >= 0 && i <= last && (uint32_t) n < jr->nhosts; i++) {
			if (!bit_test(jr->node_bitmap, i))
				continue;
			_put_cores(jr, n, i, to_cores, to_cnt);
			_put_cores(jr, n, i, from_cores, from_cnt);
			n++;
		}
		(void) (*(ct.job_resume))(to_job_ptr, true);
		info(PREFIX "%pJ expanded by %pJ: cores of its %d node(s) rebuilt per node", to_job_ptr,
		     from_job_ptr, n);
	}
	_free_cores(from_cores, from_cnt);
	_free_cores(to_cores, to_cnt);
	return rc;
}

extern int select_p_job_resized(job_record_t *job_ptr, node_record_t *node_ptr)
{
	return (*(ct.job_resized))(job_ptr, node_ptr);
}

#if OMNI_SELECT_API == 2205
extern int select_p_job_signal(job_record_t *job_ptr, int signal)
{
	return (*(ct.job_signal))(job_ptr, signal);
}
#endif

extern int select_p_job_fini(job_record_t *job_ptr)
{
	return (*(ct.job_fini))(job_ptr);
}

extern int select_p_job_suspend(job_record_t *job_ptr, bool indf_susp)
{
	return (*(ct.job_suspend))(job_ptr, indf_susp);
}

extern int select_p_job_resume(job_record_t *job_ptr, bool indf_susp)
{
	return (*(ct.job_resume))(job_ptr, indf_susp);
}

extern bitstr_t *select_p_step_pick_nodes(job_record_t *job_ptr, select_jobinfo_t *step_jobinfo, uint32_t node_count, bitstr_t **avail_nodes)
{
	return (*(ct.step_pick_nodes))(job_ptr, step_jobinfo, node_count, avail_nodes);
}

extern int select_p_step_start(step_record_t *step_ptr)
{
	return (*(ct.step_start))(step_ptr);
}

extern int select_p_step_finish(step_record_t *step_ptr, bool killing_step)
{
	return (*(ct.step_finish))(step_ptr, killing_step);
}

extern int select_p_select_nodeinfo_pack(select_nodeinfo_t *nodeinfo, buf_t *buffer, uint16_t protocol_version)
{
	return (*(ct.nodeinfo_pack))(nodeinfo, buffer, protocol_version);
}

extern int select_p_select_nodeinfo_unpack(select_nodeinfo_t **nodeinfo, buf_t *buffer, uint16_t protocol_version)
{
	return (*(ct.nodeinfo_unpack))(nodeinfo, buffer, protocol_version);
}

extern select_nodeinfo_t *select_p_select_nodeinfo_alloc(void)
{
	return (*(ct.nodeinfo_alloc))();
}

extern int select_p_select_nodeinfo_free(select_nodeinfo_t *nodeinfo)
{
	return (*(ct.nodeinfo_free))(nodeinfo);
}

extern int select_p_select_nodeinfo_set_all(void)
{
	return (*(ct.nodeinfo_set_all))();
}

extern int select_p_select_nodeinfo_set(job_record_t *job_ptr)
{
	return (*(ct.nodeinfo_set))(job_ptr);
}

extern int select_p_select_nodeinfo_get(select_nodeinfo_t *nodeinfo, enum select_nodedata_type dinfo, enum node_states state, void *data)
{
	return (*(ct.nodeinfo_get))(nodeinfo, dinfo, state, data);
}

extern select_jobinfo_t *select_p_select_jobinfo_alloc(void)
{
	return (*(ct.jobinfo_alloc))();
}

extern int select_p_select_jobinfo_free(select_jobinfo_t *jobinfo)
{
	return (*(ct.jobinfo_free))(jobinfo);
}

extern int select_p_select_jobinfo_set(select_jobinfo_t *jobinfo, enum select_jobdata_type data_type, void *data)
{
	return (*(ct.jobinfo_set))(jobinfo, data_type, data);
}

extern int select_p_select_jobinfo_get(select_jobinfo_t *jobinfo, enum select_jobdata_type data_type, void *data)
{
	return (*(ct.jobinfo_get))(jobinfo, data_type, data);
}

extern select_jobinfo_t *select_p_select_jobinfo_copy(select_jobinfo_t *jobinfo)
{
	return (*(ct.jobinfo_copy))(jobinfo);
}

extern int select_p_select_jobinfo_pack(select_jobinfo_t *jobinfo, buf_t *buffer, uint16_t protocol_version)
{
	return (*(ct.jobinfo_pack))(jobinfo, buffer, protocol_version);
}

extern int select_p_select_jobinfo_unpack(select_jobinfo_t **jobinfo, buf_t *buffer, uint16_t protocol_version)
{
	return (*(ct.jobinfo_unpack))(jobinfo, buffer, protocol_version);
}

#if OMNI_SELECT_API == 2205
extern char *select_p_select_jobinfo_sprint(select_jobinfo_t *jobinfo, char *buf, size_t size, int mode)
{
	return (*(ct.jobinfo_sprint))(jobinfo, buf, size, mode);
}

extern char *select_p_select_jobinfo_xstrdup(select_jobinfo_t *jobinfo, int mode)
{
	return (*(ct.jobinfo_xstrdup))(jobinfo, mode);
}
#endif

extern int select_p_get_info_from_plugin(enum select_plugindata_info dinfo, job_record_t *job_ptr, void *data)
{
	return (*(ct.get_info_from_plugin))(dinfo, job_ptr, data);
}

#if OMNI_SELECT_API == 2205
extern int select_p_update_node_config(int index)
{
	return (*(ct.update_node_config))(index);
}
#endif

extern int select_p_reconfigure(void)
{
	return (*(ct.reconfigure))();
}

#if OMNI_SELECT_API == 2205
extern bitstr_t *select_p_resv_test(resv_desc_msg_t *resv_desc_ptr, uint32_t node_cnt, bitstr_t *avail_bitmap, bitstr_t **core_bitmap)
{
	return (*(ct.resv_test))(resv_desc_ptr, node_cnt, avail_bitmap, core_bitmap);
}
#endif

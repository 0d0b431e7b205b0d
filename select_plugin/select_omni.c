/*
 * select/omni: Slurm 22.05's node selection, with select/cons_tres doing the work.
 *
 * Every select_p_* entry point forwards to select/cons_tres, loaded through Slurm's own
 * plugin loader (plugin_context_create) into a table of its functions. Linking against
 * select_cons_tres.so instead would bind its `plugin_id` to ours and make it act as
 * cons_res. cons_tres's init() runs a second time when this plugin loads it (slurmctld has
 * loaded every select plugin already); it is idempotent.
 *
 * This file is the forwarding layer: a job is placed exactly as under select/cons_tres.
 * Placing elastic units inside domains (placement/, site_layout) hooks into
 * select_p_job_test.
 *
 * Sites must install select_omni.so wherever Slurm runs (slurmctld, slurmd, and the hosts
 * of srun, squeue and sinfo): packed job and node data carry this plugin's id, and Slurm
 * unpacks them only where the plugin is present. Where slurmctld compares SelectType with
 * "cons_tres" by name (dynamic nodes, MaxNodeCount, job expansion), select/omni is not
 * cons_tres; see select_omni(8).
 *
 * Runs inside slurmctld, slurmd, slurmstepd and the client commands: init() does nothing but
 * load cons_tres, and nothing here blocks or takes slurmctld's locks.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>

#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"
#include "src/common/log.h"
#include "src/common/plugin.h"
#include "src/common/select.h"
#include "src/slurmctld/slurmctld.h"

const char plugin_name[] = "slurm-omni: elastic units inside hardware domains (over cons_tres)";
const char plugin_type[] = "select/omni";
/* Unique among select plugins (101-110 are Slurm's); slurmdbd keeps it in 16 bits. */
const uint32_t plugin_id = 190;
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

#define PREFIX "select/omni: "
/* node_select_syms is declared without its size: plugin_id and the 36 entry points. */
#define SELECT_SYMS 37

static slurm_select_ops_t ct;
static plugin_context_t *ct_context = NULL;

extern int init(void)
{
	if (ct_context)
		return SLURM_SUCCESS;
	ct_context = plugin_context_create("select", "select/cons_tres", (void **) &ct,
					   node_select_syms, SELECT_SYMS * sizeof(char *));
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

extern int select_p_job_init(List job_list)
{
	return (*(ct.job_init))(job_list);
}

extern int select_p_node_init(void)
{
	return (*(ct.node_init))();
}

extern int select_p_job_test(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes, uint32_t max_nodes, uint32_t req_nodes, uint16_t mode, List preemptee_candidates, List *preemptee_job_list, bitstr_t *exc_core_bitmap)
{
	return (*(ct.job_test))(job_ptr, bitmap, min_nodes, max_nodes, req_nodes, mode, preemptee_candidates, preemptee_job_list, exc_core_bitmap);
}

extern int select_p_job_begin(job_record_t *job_ptr)
{
	return (*(ct.job_begin))(job_ptr);
}

extern int select_p_job_ready(job_record_t *job_ptr)
{
	return (*(ct.job_ready))(job_ptr);
}

extern int select_p_job_expand(job_record_t *from_job_ptr, job_record_t *to_job_ptr)
{
	return (*(ct.job_expand))(from_job_ptr, to_job_ptr);
}

extern int select_p_job_resized(job_record_t *job_ptr, node_record_t *node_ptr)
{
	return (*(ct.job_resized))(job_ptr, node_ptr);
}

extern int select_p_job_signal(job_record_t *job_ptr, int signal)
{
	return (*(ct.job_signal))(job_ptr, signal);
}

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

extern char *select_p_select_jobinfo_sprint(select_jobinfo_t *jobinfo, char *buf, size_t size, int mode)
{
	return (*(ct.jobinfo_sprint))(jobinfo, buf, size, mode);
}

extern char *select_p_select_jobinfo_xstrdup(select_jobinfo_t *jobinfo, int mode)
{
	return (*(ct.jobinfo_xstrdup))(jobinfo, mode);
}

extern int select_p_get_info_from_plugin(enum select_plugindata_info dinfo, job_record_t *job_ptr, void *data)
{
	return (*(ct.get_info_from_plugin))(dinfo, job_ptr, data);
}

extern int select_p_update_node_config(int index)
{
	return (*(ct.update_node_config))(index);
}

extern int select_p_reconfigure(void)
{
	return (*(ct.reconfigure))();
}

extern bitstr_t *select_p_resv_test(resv_desc_msg_t *resv_desc_ptr, uint32_t node_cnt, bitstr_t *avail_bitmap, bitstr_t **core_bitmap)
{
	return (*(ct.resv_test))(resv_desc_ptr, node_cnt, avail_bitmap, core_bitmap);
}

/*
 * job_submit/omni: a plain `scontrol update JobId=J NumNodes=N` (or `NodeList=`) on a running
 * slurm-omni job becomes a graceful shrink.
 *
 * Without it, Slurm kills the job's steps on the nodes it releases at once, with no signal a
 * rank can act on, and the job recovers through the lost-rank path (a rewind to its last
 * checkpoint). slurmctld calls job_modify() before it applies an update; when the update
 * would take nodes on which a unit step of omni-launch runs (a step named omni-uN), this
 * plugin takes the node change out of the update and records it on the job instead, in its
 * SystemComment, as
 *
 *     omni-release=HOSTLIST@UNIXTIME
 *
 * (the nodes Slurm itself would have released: for NumNodes=N the batch host and the first
 * N-1 other nodes stay, as slurmctld chooses), and sends SIGURG to the job's batch script
 * (its process group: omni-launch, whose handler reads the job then; the signal's default
 * action is to ignore it). omni-launch drains the units on those nodes at the next step
 * boundary and gives the nodes back with `scontrol update NodeList=`, which then takes no unit step's node and passes
 * here untouched (clearing the record). Anything else passes untouched too: pending jobs,
 * growth, NumNodes=0 and ALL, NodeList= naming a node outside the job, and a shrink whose
 * nodes run no unit step (nothing to drain, so there is nothing to wait for).
 *
 * Only the job's owner and Slurm's operators are deferred (slurmctld checks the requester
 * after this plugin). It runs inside slurmctld with the job write lock held: no I/O, no
 * waiting, no allocation beyond the node names of one job (at submission, a copy of its TRES
 * request), and it never refuses an update.
 *
 * At submission it turns --omni-sm-slice=P into a gres/mps request, and gives an elastic job
 * of units that names no node count the node range its units need (see job_submit()).
 */
#include "config.h"

#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"
#include "src/common/bitstring.h"
#include "src/common/list.h"
#include "src/common/log.h"
#include "src/common/node_conf.h"
#include "src/common/read_config.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"
#include "src/slurmctld/slurmctld.h"

const char plugin_name[] = "slurm-omni: graceful node-count shrink of elastic jobs";
const char plugin_type[] = "job_submit/omni";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

#define PREFIX "job_submit/omni: "

/*
 * How a GRES is written in a job's TRES requests (tres_per_node etc.): "gres:NAME:COUNT"
 * through 23.02, "gres/NAME:COUNT" from 23.11 on (SchedMD's gres_prepend_tres_type), whose
 * slurmctld refuses the old form with "Invalid Trackable RESource (TRES) specification".
 * The plugin is built against the exact release it loads into.
 */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 11, 0)
#define GRES_TRES_PREFIX "gres/"
#else
#define GRES_TRES_PREFIX "gres:"
#endif

/* node_name2bitmap() gained an out-parameter for names it could not resolve after 22.05
 * (configure reads which the source tree has). */
#ifdef OMNI_NODE_NAME2BITMAP_INVALID
#define NAMES_TO_BITMAP(names, bitmap) node_name2bitmap((names), false, (bitmap), NULL)
#else
#define NAMES_TO_BITMAP(names, bitmap) node_name2bitmap((names), false, (bitmap))
#endif
#define MARK "omni-release="
#define UNIT_STEP_PREFIX "omni-u"

int init(void)
{
	return SLURM_SUCCESS;
}

int fini(void)
{
	return SLURM_SUCCESS;
}

/* The value of NAME in the job's spank environment (what the SPANK plugin set), or NULL. */
static const char *_spank_env(const job_desc_msg_t *d, const char *name)
{
	size_t len = strlen(name);

	for (uint32_t i = 0; d->spank_job_env && i < d->spank_job_env_size; i++) {
		const char *e = d->spank_job_env[i];
		if (e && !strncmp(e, name, len) && e[len] == '=')
			return e + len + 1;
	}
	return NULL;
}

/* Whether one of the job's TRES requests names GRES `name` ("gpu", "mps"). */
static bool _asks_gres(const job_desc_msg_t *d, const char *name)
{
	const char *fields[] = { d->tres_per_job, d->tres_per_node, d->tres_per_socket,
				 d->tres_per_task };
	char colon[32], slash[32];

	snprintf(colon, sizeof(colon), "gres:%s", name);
	snprintf(slash, sizeof(slash), "gres/%s", name);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (fields[i] && (strstr(fields[i], colon) || strstr(fields[i], slash)))
			return true;
	return false;
}

/* Whether slurm.conf's GresTypes names mps: without it a gres/mps request is refused. */
static bool _site_has_mps(void)
{
	const char *types = slurm_conf.gres_plugins, *p;

	for (p = types; p && (p = strstr(p, "mps")); p += 3)
		if ((p == types || p[-1] == ',') && (p[3] == '\0' || p[3] == ','))
			return true;
	return false;
}

/* The value of NAME in the job's spank environment as a number 1..max, or 0 (unset or not
 * such a number: the SPANK plugin wrote these, but a job can be submitted without it). */
static unsigned long _spank_num(const job_desc_msg_t *d, const char *name, unsigned long max)
{
	const char *v = _spank_env(d, name);
	char *end = NULL;
	unsigned long n;

	if (!v || *v < '0' || *v > '9')
		return 0;
	n = strtoul(v, &end, 10);
	return (*end || n < 1 || n > max) ? 0 : n;
}

/* GPUs per node the job asks (--gres=gpu[:TYPE]:G, --gpus-per-node=G), or 0: none, or a count
 * that is not a plain number. */
static unsigned long _gpus_per_node(const char *tres)
{
	unsigned long g = 0;
	char *copy, *tok, *save = NULL;

	if (!tres)
		return 0;
	copy = xstrdup(tres);
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		const char *count;
		char *end = NULL;

		if (strncmp(tok, "gres:gpu", 8) && strncmp(tok, "gres/gpu", 8))
			continue;
		if (tok[8] == '\0') {
			g = 1;
			break;
		}
		if (tok[8] != ':')
			continue;
		count = strrchr(tok, ':') + 1;
		g = strtoul(count, &end, 10);
		if (*count < '0' || *count > '9' || *end)
			g = 0;
		break;
	}
	xfree(copy);
	return g;
}

/*
 * An elastic job of units (OMNI_ELASTIC_MIN/MAX, OMNI_UNIT_SIZE=N) that asks G GPUs on each
 * node and no node count (sbatch without -N) gets the nodes its units need, as Slurm's own
 * node range: with G/N units a node (G a multiple of N), ceil(MIN/(G/N)) .. floor(MAX/(G/N))
 * nodes; with units of N/G whole nodes (N a multiple of G), MIN*N/G .. MAX*N/G nodes, and,
 * where Slurm has segments (24.05+, topology/block), segments of N/G nodes, so that each
 * unit lies in one block. A job that names its nodes, or whose G and N fit neither way, is
 * left as it is: select/omni (22.05) and omni-launch work with whatever Slurm gives.
 */
static void _unit_nodes(job_desc_msg_t *d, uint32_t uid)
{
	unsigned long min = _spank_num(d, "OMNI_ELASTIC_MIN", 65536);
	unsigned long max = _spank_num(d, "OMNI_ELASTIC_MAX", 65536);
	unsigned long n = _spank_num(d, "OMNI_UNIT_SIZE", 4096);
	unsigned long g = _gpus_per_node(d->tres_per_node);
	unsigned long lo, hi, span = 0;

	if (!min || !max || min > max || !n || !g)
		return;
	if (d->min_nodes != NO_VAL || d->max_nodes != NO_VAL || (d->req_nodes && d->req_nodes[0]))
		return;
	if (g % n == 0) {
		unsigned long per = g / n;

		lo = (min + per - 1) / per;
		hi = max / per;
	} else if (n % g == 0) {
		span = n / g;
		lo = min * span;
		hi = max * span;
	} else {
		return;
	}
	if (!hi || lo > hi)
		return;
	d->min_nodes = lo;
	d->max_nodes = hi;
#ifdef OMNI_JOB_SEGMENT_SIZE
	if (span > 1 && (!d->segment_size || d->segment_size == NO_VAL16) &&
	    !xstrcmp(slurm_conf.topology_plugin, "topology/block"))
		d->segment_size = span;
#endif
	debug("%sjob from uid %u: %lu..%lu units of %lu GPU(s), %lu GPU(s) a node: %lu-%lu nodes", PREFIX,
	      uid, min, max, n, g, lo, hi);
}

/*
 * --omni-sm-slice=P: the SPANK plugin checked P (and that the site allows slices) in sbatch
 * and put OMNI_SM_SLICE=P in the job's spank environment. Here it becomes Slurm's own
 * request for P shares of gres/mps on each node (gres.conf: `omni-hal gres-conf --mps`), so
 * that slurmctld places the job where a GPU has P% left, lets such jobs share a GPU up to
 * 100%, and never gives a whole-GPU job a shared one. A job that also asks for whole GPUs
 * is refused: a slice is a share of one GPU per node. A job that asks gres/mps itself keeps
 * its own request. Where GresTypes has no mps, slices are left as they are (the share then
 * only sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, as the SPANK plugin does).
 */
extern int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid,
		      char **err_msg)
{
	const char *slice = _spank_env(job_desc, "OMNI_SM_SLICE");
	char *end = NULL;
	unsigned long pct;

	_unit_nodes(job_desc, submit_uid);
	if (!slice)
		return SLURM_SUCCESS;
	pct = strtoul(slice, &end, 10);
	if (!*slice || *end || pct < 1 || pct > 100) {
		if (err_msg)
			*err_msg = xstrdup_printf("omni: OMNI_SM_SLICE='%.16s': expected a percentage 1..100 (--omni-sm-slice)",
						  slice);
		return ESLURM_INVALID_GRES;
	}
	if (_asks_gres(job_desc, "mps") || !_site_has_mps())
		return SLURM_SUCCESS;
	if (_asks_gres(job_desc, "gpu")) {
		if (err_msg)
			*err_msg = xstrdup_printf("omni: --omni-sm-slice=%lu cannot be combined with whole GPUs (--gres=gpu, --gpus*): a slice is %lu%% of one GPU on each node (gres/mps)",
						  pct, pct);
		return ESLURM_INVALID_GRES;
	}
	if (job_desc->tres_per_node && job_desc->tres_per_node[0])
		xstrfmtcat(job_desc->tres_per_node, "," GRES_TRES_PREFIX "mps:%lu", pct);
	else {
		xfree(job_desc->tres_per_node);
		job_desc->tres_per_node = xstrdup_printf(GRES_TRES_PREFIX "mps:%lu", pct);
	}
	debug("%sjob from uid %u: --omni-sm-slice=%lu asks gres/mps: tres_per_node=%s", PREFIX,
	      submit_uid, pct, job_desc->tres_per_node);
	return SLURM_SUCCESS;
}

/*
 * The nodes this update takes from the running job, or NULL when it takes none (or is not
 * a plain shrink). The caller frees the bitmap.
 */
static bitstr_t *_taken_nodes(job_desc_msg_t *d, job_record_t *job)
{
	bitstr_t *taken = NULL;

	if (d->req_nodes) {
		bitstr_t *keep = NULL;

		if ((d->req_nodes[0] == '\0') ||
		    NAMES_TO_BITMAP(d->req_nodes, &keep) ||
		    (bit_size(keep) != bit_size(job->node_bitmap)) ||
		    !bit_super_set(keep, job->node_bitmap)) {
			FREE_NULL_BITMAP(keep);
			return NULL;
		}
		taken = bit_copy(job->node_bitmap);
		bit_and_not(taken, keep);
		FREE_NULL_BITMAP(keep);
	} else if ((d->min_nodes != NO_VAL) && (d->min_nodes != INFINITE) &&
		   (d->min_nodes > 0) && (d->min_nodes < job->node_cnt)) {
		/* As slurmctld's _update_job: the batch host stays, then the first. */
		bitstr_t *batch = NULL;
		uint32_t kept = 0;
		int64_t i, first, last;

		taken = bit_copy(job->node_bitmap);
		if (job->batch_host &&
		    !NAMES_TO_BITMAP(job->batch_host, &batch) &&
		    (bit_size(batch) == bit_size(taken))) {
			bit_and_not(taken, batch);
			kept = 1;
		}
		FREE_NULL_BITMAP(batch);
		first = bit_ffs(taken);
		last = (first >= 0) ? bit_fls(taken) : -2;
		for (i = first; i <= last; i++) {
			if (!bit_test(taken, i))
				continue;
			if (++kept <= d->min_nodes)
				bit_clear(taken, i);
		}
	} else {
		return NULL;
	}
	if (bit_set_count(taken) == 0)
		FREE_NULL_BITMAP(taken);
	return taken;
}

/* Whether a running unit step of omni-launch has a node in `nodes`. */
static bool _unit_step_on(job_record_t *job, bitstr_t *nodes)
{
	struct listIterator *it;  /* ListIterator (22.05), list_itr_t * (later) */
	step_record_t *step;
	bool found = false;

	if (!job->step_list)
		return false;
	it = list_iterator_create(job->step_list);
	while ((step = list_next(it))) {
		if (!step->name ||
		    strncmp(step->name, UNIT_STEP_PREFIX,
			    strlen(UNIT_STEP_PREFIX)))
			continue;
		if (step->state != JOB_RUNNING || !step->step_node_bitmap)
			continue;
		if ((bit_size(step->step_node_bitmap) == bit_size(nodes)) &&
		    bit_overlap_any(step->step_node_bitmap, nodes)) {
			found = true;
			break;
		}
	}
	list_iterator_destroy(it);
	return found;
}

/*
 * Replaces the job's omni-release record (a word of its SystemComment) with `record`, or
 * removes it when `record` is NULL; the rest of the comment is kept.
 */
static void _set_record(job_record_t *job, const char *record)
{
	char *out = NULL, *save = NULL, *copy, *word;

	if (job->system_comment) {
		copy = xstrdup(job->system_comment);
		for (word = strtok_r(copy, " ", &save); word;
		     word = strtok_r(NULL, " ", &save)) {
			if (!strncmp(word, MARK, strlen(MARK)))
				continue;
			xstrfmtcat(out, "%s%s", out ? " " : "", word);
		}
		xfree(copy);
	}
	if (record)
		xstrfmtcat(out, "%s%s", out ? " " : "", record);
	xfree(job->system_comment);
	job->system_comment = out;
}

/* After 22.05 slurmctld passes an error message pointer too; this plugin never refuses. */
#ifdef OMNI_JOB_MODIFY_ERR_MSG
extern int job_modify(job_desc_msg_t *job_desc, job_record_t *job_ptr,
		      uint32_t submit_uid, char **err_msg)
#else
extern int job_modify(job_desc_msg_t *job_desc, job_record_t *job_ptr,
		      uint32_t submit_uid)
#endif
{
	bitstr_t *taken;
	char *names, *record = NULL;
	int rc;

#ifdef OMNI_JOB_MODIFY_ERR_MSG
	(void) err_msg;
#endif
	if (!job_desc || !job_ptr || !IS_JOB_RUNNING(job_ptr) ||
	    !job_ptr->node_bitmap)
		return SLURM_SUCCESS;
	/*
	 * slurmctld checks who may update the job only after this call: a record made for
	 * anyone else would shrink another user's job through its omni-launch. The job's
	 * owner and Slurm's operators are deferred; other requests pass untouched, for
	 * slurmctld to refuse (or, for an account coordinator, to apply at once).
	 */
	if ((submit_uid != job_ptr->user_id) && !validate_operator(submit_uid))
		return SLURM_SUCCESS;
	taken = _taken_nodes(job_desc, job_ptr);
	if (!taken)
		return SLURM_SUCCESS;
	if (!_unit_step_on(job_ptr, taken)) {
		/* Drained already (omni-launch's own release), or not an omni job. */
		if (job_ptr->system_comment &&
		    strstr(job_ptr->system_comment, MARK))
			_set_record(job_ptr, NULL);
		FREE_NULL_BITMAP(taken);
		return SLURM_SUCCESS;
	}
	names = bitmap2node_name(taken);
	xstrfmtcat(record, "%s%s@%" PRId64, MARK, names, (int64_t) time(NULL));
	_set_record(job_ptr, record);
	info(PREFIX "%pJ: shrink by uid %u deferred: omni-launch drains the units on %s at their next step boundary, then gives the nodes back",
	     job_ptr, submit_uid, names);
	/*
	 * omni-launch learns of the record from this signal instead of reading the job every
	 * few seconds (an idle job would cost slurmctld an RPC a second). job_signal() queues
	 * the message to the batch host on slurmctld's agent and returns: nothing here waits.
	 * A lost signal (the batch host's slurmd down) is caught by omni-launch's slow look.
	 */
	rc = job_signal(job_ptr, SIGURG, KILL_FULL_JOB | KILL_JOB_BATCH, 0, false);
	if (rc != SLURM_SUCCESS)
		info(PREFIX "%pJ: cannot tell omni-launch of the deferred shrink now (%s); it reads the record within minutes",
		     job_ptr, slurm_strerror(rc));
	/* The node change waits for omni-launch; the rest of the update applies. */
	job_desc->min_nodes = NO_VAL;
	job_desc->max_nodes = NO_VAL;
	xfree(job_desc->req_nodes);
	xfree(record);
	xfree(names);
	FREE_NULL_BITMAP(taken);
	return SLURM_SUCCESS;
}

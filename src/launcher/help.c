/* crun --help, made from the option table so that it lists every option
 * with its default, grouped, within 80 columns. */
#include "launcher/help.h"
#include "launcher/options.h"

#include <string.h>

#define HELP_WIDTH 79
#define DESC_COL 24

static const char *const intro =
	"usage: crun [OPTIONS] SCRIPT.py|COMMAND [ARGS...]\n"
	"       crun [OPTIONS] -m MODULE [ARGS...]\n"
	"       crun status [--run ID] [--endpoint HOST:PORT] [--token-file FILE]\n"
	"                   [--json] [--watch [SECONDS]] [--connect-timeout DURATION]\n"
	"\n"
	"Starts --nproc-per-node workers of the command on this node, gives them\n"
	"torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), prints their\n"
	"output prefixed with the rank, and restarts them all when one fails.\n"
	"With --nnodes N (or MIN:MAX) and --rdzv-endpoint HOST[:PORT] on every\n"
	"node, the agents form one job through the rendezvous store on HOST and\n"
	"restart it on every node when a worker fails or a node leaves or joins.\n"
	"SCRIPT.py runs as $PYTHON_EXEC -u SCRIPT.py (python3 when unset); any\n"
	"other command is executed directly. Options end at the first argument\n"
	"that is not an option, or at --; \"${local_rank}\" in ARGS becomes each\n"
	"worker's local rank.\n"
	"\n"
	"Each option NAME is also read from PET_NAME (PET_NPROC_PER_NODE, ...) and\n"
	"from the config file (nproc_per_node: 4); the command line wins over\n"
	"PET_ variables, which win over the config file, which wins over the\n"
	"defaults.\n";

static const char *const outro =
	"\n"
	"Exit status: 0 all workers succeeded, 1 the job failed, 2 bad usage or\n"
	"config, 126/127 the command cannot be executed / was not found, 128+N\n"
	"stopped by signal N. See crun(1).\n"
	"\n"
	"crun status shows a running job: its round, restarts, members and every\n"
	"rank (crun status --help; crun -- status runs a program called status).\n";

/* Writes text wrapped to HELP_WIDTH, every line starting at column col;
 * the first line continues at column at. */
static void wrap(FILE *f, const char *text, int col, int at)
{
	const char *p = text;

	while (*p) {
		int room = HELP_WIDTH - at;
		size_t len = strlen(p), cut;

		if ((int)len <= room) {
			cut = len;
		} else {
			cut = (size_t)room;
			while (cut > 0 && p[cut] != ' ')
				cut--;
			if (cut == 0) /* a word longer than the room */
				cut = strcspn(p, " ");
		}
		for (size_t i = 0; i < cut; i++) /* \1: a space that never breaks */
			fputc(p[i] == '\1' ? ' ' : p[i], f);
		fputc('\n', f);
		p += cut;
		while (*p == ' ')
			p++;
		if (*p)
			fprintf(f, "%*s", col, "");
		at = col;
	}
}

void crun__launch_print_help(FILE *f)
{
	const struct crun__launch_optdef *defs;
	const char *group = NULL;
	size_t n;

	defs = crun__launch_optdefs(&n);
	fputs(intro, f);
	for (size_t i = 0; i < n; i++) {
		const struct crun__launch_optdef *d = &defs[i];
		char opt[64], desc[640];
		int len;

		if (!group || strcmp(group, d->group)) {
			group = d->group;
			fprintf(f, "\n%s:\n", group);
		}
		if (d->short_name)
			len = snprintf(opt, sizeof(opt), "  -%c, --%s", d->short_name, d->name);
		else
			len = snprintf(opt, sizeof(opt), "      --%s", d->name);
		if (d->metavar)
			len += snprintf(opt + len, sizeof(opt) - (size_t)len, " %s", d->metavar);
		if (d->default_text)
			snprintf(desc, sizeof(desc), "%s (default:\1%s)", d->help, d->default_text);
		else
			snprintf(desc, sizeof(desc), "%s", d->help);
		fputs(opt, f);
		if (len + 2 > DESC_COL) {
			fprintf(f, "\n%*s", DESC_COL, "");
		} else {
			fprintf(f, "%*s", DESC_COL - len, "");
		}
		wrap(f, desc, DESC_COL, DESC_COL);
	}
	fputs(outro, f);
}

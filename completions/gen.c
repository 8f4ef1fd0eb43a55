/* crun-completions: writes the bash or zsh completion script of one of
 * crun's programs on stdout, at build time (completions/meson.build).
 *
 *   crun-completions bash|zsh PROG --table [--sub NAME=HELPFILE]...
 *   crun-completions bash|zsh PROG --help HELPFILE [--sub NAME=HELPFILE]...
 *
 * --table: PROG is crun; its options are crun's option table (the one
 * crun --help prints), and the first word that is not an option is the
 * command crun runs. --help: the options and commands are read from
 * HELPFILE, the output of PROG --help. --sub NAME=HELPFILE: PROG has a
 * command NAME whose options are those of HELPFILE (PROG NAME --help).
 *
 * What a --help text declares, as crun's programs write it:
 *   option lines   "  -v, --verbose   text", "  --port PORT   text",
 *                  "  --watch [SECONDS]   text" (the value is optional)
 *   commands       lines "  NAME ARGS   text" under a "Commands:" heading,
 *                  and usage lines "PROG NAME ARGS" after the first one;
 *                  "[--opt VALUE]" in them are options of that command
 *   positionals    the first usage line: a placeholder other than
 *                  COMMAND, [ARG]... and [OPTION]... is a file
 * A value placeholder names its choices in lower case ("on|off",
 * "N|auto|cpu|gpu"); FILE is a file, DIR a directory.
 *
 * Exit status: 0 written; 1 a help text that cannot be read, declares
 * nothing or more than fits; 2 usage error. */
#include "launcher/options.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPTS 96
#define MAX_CMDS 24
#define MAX_CMD_OPTS 24
#define DESC_MAX 72

enum value_kind {
	VALUE_NONE = 0, /* a flag */
	VALUE_WORD,	/* anything; the choices when there are some */
	VALUE_FILE,
	VALUE_DIR,
};

struct opt {
	char name[48]; /* long name without "--"; "" for a short option only */
	char short_name;
	enum value_kind kind;
	bool optional; /* "--watch [SECONDS]" */
	char metavar[48];
	char choices[160]; /* space-separated */
	char desc[DESC_MAX + 1];
};

struct cmd {
	char name[32];
	char desc[DESC_MAX + 1];
	struct opt opts[MAX_CMD_OPTS];
	int nopts;
};

enum positional {
	POS_NONE = 0,
	POS_FILES,   /* crun-train CONFIG.yaml */
	POS_COMMAND, /* crun: a program and its arguments */
};

struct prog {
	const char *name;
	char ident[48]; /* the name as a shell identifier: crun_rdzvd */
	struct opt opts[MAX_OPTS];
	int nopts;
	struct cmd cmds[MAX_CMDS];
	int ncmds;
	enum positional pos;
};

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "crun-completions: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	exit(1);
}

static void copy(char *dst, size_t size, const char *src, size_t len)
{
	if (len >= size)
		len = size - 1;
	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* The first clause of a help text (up to ";", ": " or " ("), cut at a
 * word boundary to fit. */
static void set_desc(char *dst, const char *text)
{
	size_t len = strcspn(text, ";\n");
	const char *colon = strstr(text, ": "), *paren = strstr(text, " (");

	if (colon && (size_t)(colon - text) < len)
		len = (size_t)(colon - text);
	if (paren && (size_t)(paren - text) < len)
		len = (size_t)(paren - text);

	while (len && text[len - 1] == ' ')
		len--;
	if (len > DESC_MAX) {
		len = DESC_MAX;
		while (len && text[len] != ' ')
			len--;
	}
	copy(dst, DESC_MAX + 1, text, len);
}

/* Fills kind and choices from a value placeholder: lower-case words
 * between '|' are choices, FILE a file, DIR a directory. */
static void set_value(struct opt *o, const char *metavar, size_t len)
{
	size_t used = 0;

	o->kind = VALUE_WORD;
	copy(o->metavar, sizeof(o->metavar), metavar, len);
	for (const char *p = o->metavar; *p;) {
		size_t n = strcspn(p, "|");
		bool lower = n > 0;

		for (size_t i = 0; i < n; i++)
			if (!islower((unsigned char)p[i]) && !isdigit((unsigned char)p[i]) &&
			    p[i] != '-')
				lower = false;
		if (lower && used + n + 2 < sizeof(o->choices)) {
			if (used)
				o->choices[used++] = ' ';
			memcpy(o->choices + used, p, n);
			used += n;
			o->choices[used] = '\0';
		} else if (n == 4 && !strncmp(p, "FILE", 4)) {
			o->kind = VALUE_FILE;
		} else if (n == 3 && !strncmp(p, "DIR", 3)) {
			o->kind = VALUE_DIR;
		}
		p += n;
		if (*p == '|')
			p++;
	}
}

static struct opt *find_opt(struct opt *opts, int n, const char *name, char short_name)
{
	for (int i = 0; i < n; i++)
		if ((name[0] && !strcmp(opts[i].name, name)) ||
		    (short_name && opts[i].short_name == short_name))
			return &opts[i];
	return NULL;
}

static struct opt *add_opt(struct opt *opts, int *n, int max, const char *name, char short_name)
{
	struct opt *o = find_opt(opts, *n, name, short_name);

	if (o)
		return o;
	if (*n == max)
		die("more options than fit (%s)", name);
	o = &opts[(*n)++];
	memset(o, 0, sizeof(*o));
	copy(o->name, sizeof(o->name), name, strlen(name));
	o->short_name = short_name;
	return o;
}

static struct cmd *add_cmd(struct prog *p, const char *name, size_t len)
{
	char buf[32];
	struct cmd *c;

	copy(buf, sizeof(buf), name, len);
	for (int i = 0; i < p->ncmds; i++)
		if (!strcmp(p->cmds[i].name, buf))
			return &p->cmds[i];
	if (p->ncmds == MAX_CMDS)
		die("more commands than fit (%s)", buf);
	c = &p->cmds[p->ncmds++];
	memset(c, 0, sizeof(*c));
	strcpy(c->name, buf);
	return c;
}

/* crun's option table. */
static void read_table(struct prog *p)
{
	const struct crun__launch_optdef *defs;
	size_t n;

	defs = crun__launch_optdefs(&n);
	for (size_t i = 0; i < n; i++) {
		struct opt *o =
			add_opt(p->opts, &p->nopts, MAX_OPTS, defs[i].name, defs[i].short_name);

		if (defs[i].takes_value)
			set_value(o, defs[i].metavar, strlen(defs[i].metavar));
		set_desc(o->desc, defs[i].help);
	}
	p->pos = POS_COMMAND;
}

static bool is_name_char(char c)
{
	return islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-';
}

/* "[--opt VALUE]" and "[--opt [VALUE]]" in a command's line. */
static void read_inline_opts(struct cmd *c, const char *s)
{
	for (const char *p = strstr(s, "[--"); p; p = strstr(p + 1, "[--")) {
		const char *name = p + 3, *v;
		size_t len = 0;
		char buf[48];
		struct opt *o;

		while (is_name_char(name[len]))
			len++;
		if (!len)
			continue;
		copy(buf, sizeof(buf), name, len);
		o = add_opt(c->opts, &c->nopts, MAX_CMD_OPTS, buf, 0);
		v = name + len;
		if (*v == ' ') {
			v++;
			o->optional = *v == '[';
			v += o->optional;
			set_value(o, v, strcspn(v, " ]"));
		}
	}
}

/* An option line: "  -v, --verbose   say ...", "  --port PORT  ...";
 * false when line is not one. */
static bool read_opt_line(struct opt *opts, int *n, int max, const char *line)
{
	const char *p = line, *name;
	char short_name = 0, buf[48];
	size_t len = 0;
	struct opt *o;
	int indent = 0;

	while (*p == ' ') {
		p++;
		indent++;
	}
	if (indent == 0 || indent > 8 || *p != '-')
		return false;
	if (p[1] != '-' && isalnum((unsigned char)p[1])) {
		short_name = p[1];
		p += 2;
		if (!strncmp(p, ", --", 4))
			p += 2;
		else if (*p != ' ' && *p != '\0')
			return false;
	}
	if (!strncmp(p, "--", 2)) {
		name = p + 2;
		while (is_name_char(name[len]))
			len++;
		if (!len)
			return false;
		p = name + len;
	}
	copy(buf, sizeof(buf), len ? name : "", len);
	o = add_opt(opts, n, max, buf, short_name);
	if (p[0] == ' ' && p[1] != ' ' && p[1] != '\0') { /* one space: the value */
		p++;
		o->optional = *p == '[';
		p += o->optional;
		set_value(o, p, strcspn(p, " ]"));
		p += strcspn(p, " ");
	}
	while (*p == ' ')
		p++;
	set_desc(o->desc, p);
	return true;
}

/* The first usage line: a placeholder that is neither an option's value
 * nor COMMAND, ARG or OPTION means file arguments. */
static void read_first_usage(struct prog *p, const char *args)
{
	const char *s = args;
	bool value_next = false;

	while (*s) {
		size_t len;
		char word[64];

		while (*s == ' ')
			s++;
		len = strcspn(s, " ");
		if (!len)
			break;
		copy(word, sizeof(word), s, len);
		s += len;
		if (value_next) {
			value_next = false;
			continue;
		}
		if (!strncmp(word, "[-", 2) || word[0] == '-') {
			value_next = !strchr(word, ']');
			continue;
		}
		if (strstr(word, "COMMAND") || strstr(word, "ARG") || strstr(word, "OPTION"))
			continue;
		if (isupper((unsigned char)word[word[0] == '[']))
			p->pos = POS_FILES;
	}
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long size;

	if (!f)
		die("cannot read '%s'", path);
	if (fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		die("cannot read '%s'", path);
	buf = malloc((size_t)size + 1);
	if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size)
		die("cannot read '%s'", path);
	buf[size] = '\0';
	fclose(f);
	return buf;
}

/* A --help text: PROG's own when cmd is NULL, else the options of one
 * of its commands. */
static void read_help(struct prog *p, struct cmd *cmd, const char *path)
{
	char *text = slurp(path), *line = text;
	size_t plen = strlen(p->name);
	bool in_usage = false, in_cmds = false, first_usage = true;
	int found = 0;

	while (line && *line) {
		char *end = strchr(line, '\n'), *s = line;

		if (end)
			*end = '\0';
		if (!strncmp(s, "usage: ", 7)) {
			in_usage = true;
			s += 7;
		}
		if (!*line) {
			in_usage = in_cmds = false;
		} else if (line[0] != ' ' && strncmp(line, "usage: ", 7)) {
			in_usage = false;
			in_cmds = !strcasecmp(line, "commands:");
		}
		while (*s == ' ')
			s++;
		if (in_usage && !cmd && !strncmp(s, p->name, plen) && s[plen] == ' ') {
			const char *args = s + plen + 1;
			size_t len = 0;

			while (is_name_char(args[len]))
				len++;
			if (first_usage) {
				read_first_usage(p, args);
			} else if (len && (args[len] == ' ' || !args[len]) &&
				   islower((unsigned char)args[0])) {
				read_inline_opts(add_cmd(p, args, len), args + len);
				found++;
			}
			first_usage = false;
		} else if (in_cmds && !cmd && !strncmp(line, "  ", 2) &&
			   islower((unsigned char)s[0]) && s - line <= 4) {
			size_t len = 0;
			struct cmd *c;
			const char *desc;

			while (is_name_char(s[len]))
				len++;
			c = add_cmd(p, s, len);
			read_inline_opts(c, s + len);
			desc = strstr(s, "  ");
			if (desc) {
				while (*desc == ' ')
					desc++;
				set_desc(c->desc, desc);
			}
			found++;
		} else if (!in_cmds && !in_usage) {
			if (cmd)
				found += read_opt_line(cmd->opts, &cmd->nopts, MAX_CMD_OPTS, line);
			else
				found += read_opt_line(p->opts, &p->nopts, MAX_OPTS, line);
		}
		line = end ? end + 1 : NULL;
	}
	free(text);
	if (!found)
		die("no options or commands in '%s'", path);
}

/* Single-quoted for the shell. */
static void put_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	}
	fputc('\'', f);
}

/* ---- bash ---------------------------------------------------------- */

static void bash_opt_names(FILE *f, const struct opt *opts, int n)
{
	const char *sep = "";

	for (int i = 0; i < n; i++) {
		if (opts[i].name[0]) {
			fprintf(f, "%s--%s", sep, opts[i].name);
			sep = " ";
		}
		if (opts[i].short_name) {
			fprintf(f, "%s-%c", sep, opts[i].short_name);
			sep = " ";
		}
	}
}

static void bash_opt_pattern(FILE *f, const char *ctx, const struct opt *o)
{
	if (o->name[0] && o->short_name)
		fprintf(f, "\t%s:--%s | %s:-%c)", ctx, o->name, ctx, o->short_name);
	else if (o->name[0])
		fprintf(f, "\t%s:--%s)", ctx, o->name);
	else
		fprintf(f, "\t%s:-%c)", ctx, o->short_name);
}

/* The cases of CONTEXT:OPTION for the options that take a value (not an
 * optional one: that stays in its word): each completes the value, or,
 * when only_predicate, returns 0. */
static void bash_value_cases(FILE *f, const char *ctx, const struct opt *opts, int n,
			     bool only_predicate)
{
	for (int i = 0; i < n; i++) {
		const struct opt *o = &opts[i];

		if (o->kind == VALUE_NONE || o->optional)
			continue;
		bash_opt_pattern(f, ctx, o);
		if (only_predicate)
			fputs(" return 0 ;;\n", f);
		else if (o->kind == VALUE_FILE)
			fputs(" compopt -o filenames 2>/dev/null; "
			      "mapfile -t COMPREPLY < <(compgen -f -- \"$3\") ;;\n",
			      f);
		else if (o->kind == VALUE_DIR)
			fputs(" compopt -o filenames 2>/dev/null; "
			      "mapfile -t COMPREPLY < <(compgen -d -- \"$3\") ;;\n",
			      f);
		else if (o->choices[0])
			fprintf(f, " mapfile -t COMPREPLY < <(compgen -W '%s' -- \"$3\") ;;\n",
				o->choices);
		else
			fputs(" COMPREPLY=() ;;\n", f);
	}
}

static void write_bash(FILE *f, const struct prog *p)
{
	const char *id = p->ident;

	fprintf(f,
		"# bash completion for %s, generated by crun-completions from %s\n"
		"# (do not edit: the build writes it again).\n\n",
		p->name, p->pos == POS_COMMAND ? "crun's option table" : "its --help");

	fprintf(f,
		"# __%s_takes_value CONTEXT OPTION: 0 when OPTION takes a value in the\n"
		"# next word (CONTEXT: the command, or empty), else 1. Sets nothing.\n"
		"__%s_takes_value()\n{\n\tcase $1:$2 in\n",
		id, id);
	bash_value_cases(f, "", p->opts, p->nopts, true);
	for (int i = 0; i < p->ncmds; i++)
		bash_value_cases(f, p->cmds[i].name, p->cmds[i].opts, p->cmds[i].nopts, true);
	fputs("\t*) return 1 ;;\n\tesac\n}\n\n", f);

	fprintf(f,
		"# __%s_values CONTEXT OPTION CUR: completes the value of OPTION, which\n"
		"# takes one, into COMPREPLY.\n"
		"__%s_values()\n{\n\tcase $1:$2 in\n",
		id, id);
	bash_value_cases(f, "", p->opts, p->nopts, false);
	for (int i = 0; i < p->ncmds; i++)
		bash_value_cases(f, p->cmds[i].name, p->cmds[i].opts, p->cmds[i].nopts, false);
	fputs("\t*) COMPREPLY=() ;;\n\tesac\n}\n\n", f);

	if (p->pos == POS_COMMAND)
		fprintf(f,
			"# __%s_commands CUR: the commands that start with CUR, one a line,\n"
			"# without shell keywords and names that start with _ (completion\n"
			"# functions).\n"
			"__%s_commands()\n{\n"
			"\tlocal c keywords\n"
			"\tkeywords=\" $(compgen -A keyword | tr '\\n' ' ') \"\n"
			"\twhile IFS= read -r c; do\n"
			"\t\t[[ $c == _* || $keywords == *\" $c \"* ]] || printf '%%s\\n' \"$c\"\n"
			"\tdone < <(compgen -A command -- \"$1\" | sort -u)\n"
			"}\n\n",
			id, id);

	fprintf(f, "# __%s_options CONTEXT: the options there.\n__%s_options()\n{\n\tcase $1 in\n",
		id, id);
	fputs("\t'') echo '", f);
	bash_opt_names(f, p->opts, p->nopts);
	fputs("' ;;\n", f);
	for (int i = 0; i < p->ncmds; i++) {
		fprintf(f, "\t%s) echo '", p->cmds[i].name);
		bash_opt_names(f, p->cmds[i].opts, p->cmds[i].nopts);
		fputs("' ;;\n", f);
	}
	fputs("\tesac\n}\n\n", f);

	fprintf(f, "_%s()\n{\n", id);
	fprintf(f, "\tlocal cur=${COMP_WORDS[COMP_CWORD]} w='' cmd='' pending=''%s i=1 cmds=",
		p->pos == POS_COMMAND ? " at=''" : "");
	{
		fputc('\'', f);
		for (int i = 0; i < p->ncmds; i++)
			fprintf(f, "%s%s", i ? " " : "", p->cmds[i].name);
		fputs("'\n", f);
	}
	fputs("\tlocal -a words=(\"${COMP_WORDS[@]}\")\n"
	      "\tCOMPREPLY=()\n"
	      "\t# Walk the words before the cursor: option values, the command.\n"
	      "\twhile ((i < COMP_CWORD)); do\n"
	      "\t\tw=${words[i]}\n"
	      "\t\tif [[ -n $pending ]]; then\n"
	      "\t\t\t[[ $w == = ]] || pending=\n"
	      "\t\telif [[ $w == -- && -z $cmd ]]; then\n",
	      f);
	if (p->pos == POS_COMMAND)
		fputs("\t\t\tat=$((i + 1))\n\t\t\tbreak\n", f);
	else
		fputs("\t\t\t:\n", f);
	fprintf(f,
		"\t\telif [[ $w == -?* ]]; then\n"
		"\t\t\t__%s_takes_value \"$cmd\" \"$w\" && pending=$w\n"
		"\t\telif [[ -z $cmd && \" $cmds \" == *\" $w \"* ]]; then\n"
		"\t\t\tcmd=$w\n",
		id);
	if (p->pos == POS_COMMAND)
		fputs("\t\telif [[ -z $cmd ]]; then\n\t\t\tat=$i\n\t\t\tbreak\n", f);
	fputs("\t\tfi\n\t\t((i++))\n\tdone\n\tCOMPREPLY=()\n", f);
	if (p->pos == POS_COMMAND)
		fprintf(f,
			"\tif [[ -n $at ]]; then # the command crun runs, and its arguments\n"
			"\t\tif declare -F _command_offset >/dev/null; then\n"
			"\t\t\t_command_offset \"$at\"\n"
			"\t\telif ((at == COMP_CWORD)); then\n"
			"\t\t\tmapfile -t COMPREPLY < <(__%s_commands \"$cur\"; compgen -f -- "
			"\"$cur\")\n"
			"\t\telse\n"
			"\t\t\tcompopt -o filenames 2>/dev/null\n"
			"\t\t\tmapfile -t COMPREPLY < <(compgen -f -- \"$cur\")\n"
			"\t\tfi\n"
			"\t\treturn 0\n"
			"\tfi\n",
			id);
	fprintf(f,
		"\tif [[ -n $pending ]]; then\n"
		"\t\t[[ $cur == = ]] && cur=\n"
		"\t\t__%s_values \"$cmd\" \"$pending\" \"$cur\"\n"
		"\t\treturn 0\n"
		"\tfi\n"
		"\tif [[ $cur == -* ]]; then\n"
		"\t\tmapfile -t COMPREPLY < <(compgen -W \"$(__%s_options \"$cmd\")\" -- "
		"\"$cur\")\n"
		"\t\treturn 0\n"
		"\tfi\n",
		id, id);
	fputs("\tif [[ -z $cmd ]]; then\n\t\tmapfile -t COMPREPLY < <(compgen -W \"$cmds\" -- "
	      "\"$cur\")\n",
	      f);
	if (p->pos == POS_COMMAND)
		fprintf(f,
			"\t\tmapfile -t -O \"${#COMPREPLY[@]}\" COMPREPLY < <(__%s_commands "
			"\"$cur\")\n",
			id);
	fputs("\tfi\n", f);
	if (p->pos != POS_NONE)
		fputs("\tcompopt -o filenames 2>/dev/null\n"
		      "\tmapfile -t -O \"${#COMPREPLY[@]}\" COMPREPLY < <(compgen -f -- "
		      "\"$cur\")\n",
		      f);
	fprintf(f, "\treturn 0\n}\n\ncomplete -F _%s %s\n", id, p->name);
}

/* ---- zsh ----------------------------------------------------------- */

/* A description (special: "[]:\\") or a message (":\\") inside an
 * _arguments spec. */
static void zsh_escaped(FILE *f, const char *s, const char *special)
{
	for (; *s; s++) {
		if (strchr(special, *s))
			fputc('\\', f);
		fputc(*s, f);
	}
}

static void zsh_spec(FILE *f, const char *indent, const struct opt *o, bool is_short)
{
	char buf[512];
	FILE *m = fmemopen(buf, sizeof(buf), "w");

	if (!m)
		die("out of memory%s", "");
	if (is_short)
		fprintf(m, "*-%c%s", o->short_name, o->kind && !o->optional ? "+" : "");
	else
		fprintf(m, "*--%s%s", o->name, o->kind ? "=" : "");
	if (o->desc[0]) {
		fputc('[', m);
		zsh_escaped(m, o->desc, "[]:\\");
		fputc(']', m);
	}
	if (o->kind) {
		fputs(o->optional ? "::" : ":", m);
		zsh_escaped(m, o->metavar, ":\\");
		fputc(':', m);
		if (o->kind == VALUE_FILE)
			fputs("_files", m);
		else if (o->kind == VALUE_DIR)
			fputs("_files -/", m);
		else if (o->choices[0])
			fprintf(m, "(%s)", o->choices);
		else
			fputc(' ', m);
	}
	if (fputc('\0', m) == EOF || fclose(m))
		die("an option spec longer than fits (%s)", o->name);
	fprintf(f, " \\\n%s", indent);
	put_quoted(f, buf);
}

static void zsh_specs(FILE *f, const char *indent, const struct opt *opts, int n)
{
	for (int i = 0; i < n; i++) {
		if (opts[i].short_name)
			zsh_spec(f, indent, &opts[i], true);
		if (opts[i].name[0])
			zsh_spec(f, indent, &opts[i], false);
	}
}

static void write_zsh(FILE *f, const struct prog *p)
{
	fprintf(f,
		"#compdef %s\n"
		"# zsh completion for %s, generated by crun-completions from %s\n"
		"# (do not edit: the build writes it again).\n\n"
		"local curcontext=$curcontext state state_descr line ret=1\n"
		"typeset -A opt_args\n\n"
		"_arguments -C -s -S :",
		p->name, p->name, p->pos == POS_COMMAND ? "crun's option table" : "its --help");
	zsh_specs(f, "\t", p->opts, p->nopts);
	if (p->pos != POS_NONE || p->ncmds)
		fputs(" \\\n\t'1: :->first' \\\n\t'*:: :->rest'", f);
	fputs(" && ret=0\n\ncase $state in\nfirst)\n", f);
	if (p->ncmds) {
		fputs("\tlocal -a cmds=(", f);
		for (int i = 0; i < p->ncmds; i++) {
			char buf[128];

			snprintf(buf, sizeof(buf), "%s:%s", p->cmds[i].name, p->cmds[i].desc);
			fputs("\n\t\t", f);
			put_quoted(f, buf);
		}
		fputs("\n\t)\n\t_describe -t commands command cmds && ret=0\n", f);
	}
	if (p->pos == POS_COMMAND)
		fputs("\t_command_names -e && ret=0\n", f);
	if (p->pos != POS_NONE)
		fputs("\t_files && ret=0\n", f);
	fputs("\t;;\nrest)\n\tcase $words[1] in\n", f);
	for (int i = 0; i < p->ncmds; i++) {
		if (!p->cmds[i].nopts)
			continue;
		fprintf(f, "\t%s)\n\t\t_arguments -s -S :", p->cmds[i].name);
		zsh_specs(f, "\t\t\t", p->cmds[i].opts, p->cmds[i].nopts);
		fprintf(f, " \\\n\t\t\t'*:argument:%s' && ret=0\n\t\t;;\n",
			p->pos == POS_FILES ? "_files" : " ");
	}
	if (p->pos == POS_COMMAND)
		fputs("\t*) _normal && ret=0 ;;\n", f);
	else if (p->pos == POS_FILES)
		fputs("\t*) _files && ret=0 ;;\n", f);
	fputs("\tesac\n\t;;\nesac\n\nreturn ret\n", f);
}

static int usage_error(const char *msg)
{
	fprintf(stderr,
		"crun-completions: %s\n"
		"usage: crun-completions bash|zsh PROG --table|--help HELPFILE "
		"[--sub NAME=HELPFILE]...\n",
		msg);
	return 2;
}

int main(int argc, char **argv)
{
	static struct prog p;
	bool table = false;
	const char *help = NULL;

	if (argc < 4)
		return usage_error("missing arguments");
	if (strcmp(argv[1], "bash") && strcmp(argv[1], "zsh"))
		return usage_error("the shell is bash or zsh");
	p.name = argv[2];
	copy(p.ident, sizeof(p.ident), p.name, strlen(p.name));
	for (char *c = p.ident; *c; c++)
		if (!isalnum((unsigned char)*c))
			*c = '_';
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--table")) {
			table = true;
		} else if (!strcmp(argv[i], "--help") && i + 1 < argc) {
			help = argv[++i];
		} else if (!strcmp(argv[i], "--sub") && i + 1 < argc && strchr(argv[i + 1], '=')) {
			i++;
			continue; /* after the program's own options and commands */
		} else {
			return usage_error("bad arguments");
		}
	}
	if (table == !!help)
		return usage_error("give one of --table and --help");
	if (table)
		read_table(&p);
	else
		read_help(&p, NULL, help);
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--sub")) {
			const char *eq = strchr(argv[++i], '=');

			read_help(&p, add_cmd(&p, argv[i], (size_t)(eq - argv[i])), eq + 1);
		} else if (!strcmp(argv[i], "--help")) {
			i++;
		}
	}
	if (!strcmp(argv[1], "bash"))
		write_bash(stdout, &p);
	else
		write_zsh(stdout, &p);
	return fflush(stdout) || ferror(stdout) ? 1 : 0;
}

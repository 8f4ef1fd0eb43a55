/* crun --help. */
#ifndef CRUN_LAUNCHER_HELP_H
#define CRUN_LAUNCHER_HELP_H

#include <stdio.h>

/* Writes the usage, every option of the table with its default, grouped as
 * the table groups them, and the exit statuses; no line is longer than 79
 * columns. */
void crun__launch_print_help(FILE *f);

#endif

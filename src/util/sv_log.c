#include "util/sv_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sv_log_level = SV_LOG_WARN;

static const char *const sv_log_level_name[] = {
	[SV_LOG_ERROR] = "error",
	[SV_LOG_WARN] = "warn",
	[SV_LOG_INFO] = "info",
	[SV_LOG_DEBUG] = "debug",
};

void sv_log_init(void)
{
	const char *env = getenv("SOFTVERBS_LOG");

	if (!env)
		return;
	for (int i = 0; i <= SV_LOG_DEBUG; i++)
		if (!strcmp(env, sv_log_level_name[i]))
			sv_log_level = i;
}

void sv_log_print(enum sv_log_level level, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "softverbs[%d] %s: ", (int)getpid(),
		     sv_log_level_name[level]);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

/* Logging: SOFTVERBS_LOG=error|warn|info|debug (default warn), to stderr. */
#ifndef SV_LOG_H
#define SV_LOG_H

enum sv_log_level { SV_LOG_ERROR, SV_LOG_WARN, SV_LOG_INFO, SV_LOG_DEBUG };

extern int sv_log_level;

void sv_log_init(void);
void sv_log_print(enum sv_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define sv_log(level, ...)                                                    \
	do {                                                                  \
		if ((int)(level) <= sv_log_level)                             \
			sv_log_print(level, __VA_ARGS__);                     \
	} while (0)
#define sv_err(...) sv_log(SV_LOG_ERROR, __VA_ARGS__)
#define sv_warn(...) sv_log(SV_LOG_WARN, __VA_ARGS__)
#define sv_info(...) sv_log(SV_LOG_INFO, __VA_ARGS__)
#define sv_dbg(...) sv_log(SV_LOG_DEBUG, __VA_ARGS__)

#endif

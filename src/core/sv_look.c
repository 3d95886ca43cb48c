#include "core/sv_look.h"

_Atomic uint32_t sv_engine_look = 1;
_Atomic uint64_t sv_engine_polls;
_Atomic uint32_t sv_engine_qkey_violations;

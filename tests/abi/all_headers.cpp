// C++17 twin of all_headers.c.
#include "all_headers.c"

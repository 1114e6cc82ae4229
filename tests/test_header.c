/* The header compiles as C99 (-pedantic for the API part) and as C++, -Wall -Wextra -Werror,
   with and without the implementation, and with DCPATTN_TIMELINE (compiled, not run). Built
   twice by the Makefile; running it checks the status list, the version string and the version
   code. */
#ifdef TEST_IMPLEMENTATION
#define DCPATTN_IMPLEMENTATION
#endif
#include "dcpattn.h"
#include "dcpattn.h" /* twice: the include guard and the implementation guard hold */

#include <stdio.h>
#include <string.h>

int main(void) {
#ifdef TEST_IMPLEMENTATION
    int i, failed = 0;
    for (i = 0; i < DCPATTN_STATUS_COUNT_; i++)
        if (!dcpattn_status_string((dcpattn_status)i)[0] || !strcmp(dcpattn_status_string((dcpattn_status)i), "unknown status"))
            failed++;
    if (strcmp(dcpattn_version(), DCPATTN_VERSION_STRING))
        failed++;
    if (DCPATTN_VERSION_CODE != DCPATTN_VERSION_MAJOR * 10000 + DCPATTN_VERSION_MINOR * 100 + DCPATTN_VERSION_PATCH ||
        dcpattn_version_code() != DCPATTN_VERSION_CODE)
        failed++;
    if (strcmp(dcpattn_status_string(DCPATTN_STATUS_SUCCESS), "success"))
        failed++;
    printf("%d passed, %d failed\n", failed ? 0 : 1, failed ? 1 : 0);
    return failed != 0;
#else
    return 0;
#endif
}

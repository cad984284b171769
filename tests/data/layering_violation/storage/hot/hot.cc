// The hot module reaching up (the SSD tier is not among its dependencies) and
// into another module's private header.
#include "base_private.h"
#include "prefixkv/advanced/ssd_tier.h"

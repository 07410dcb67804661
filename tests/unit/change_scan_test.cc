// Placeholder; tests land here.
#include <gtest/gtest.h>

// Twin of the device header that declares the high-level Matmul API.
#pragma once

#include "../twin_matmul.h"

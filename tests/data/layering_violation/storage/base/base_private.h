// A private header of the base module.
#pragma once

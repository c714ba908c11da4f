// Package archtest holds only tests of the library's shape: they fail when
// an import arrow between the module's packages runs the wrong way (see
// shared/STYLE.md), and when a library package keeps changing state at
// package level.
package archtest

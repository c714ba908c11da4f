// Package archtest holds only a test: it fails when an import arrow between
// the module's packages runs the wrong way (see shared/STYLE.md).
package archtest

package redlockotel

// Acquisitions is acquisitions, for the package's external tests.
var Acquisitions = acquisitions

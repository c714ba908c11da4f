module github.com/redlock/redlock

go 1.26

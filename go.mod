module github.com/distlock/locker

go 1.24.0

module apicount
go 1.22

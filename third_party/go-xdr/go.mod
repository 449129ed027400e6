module github.com/buildbarn/go-xdr

go 1.22
